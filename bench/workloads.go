package bench

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// W1Result is the outcome of uncontended acquire+release cycles.
type W1Result struct {
	Cycles int64
	Errors int64
	Dur    time.Duration
}

// PerSec returns cycles per second.
func (r W1Result) PerSec() float64 { return float64(r.Cycles) / r.Dur.Seconds() }

// RunW1 runs goroutines that each acquire and release a key of their own,
// fail-fast, for dur.
func RunW1(m Mutexer, goroutines int, dur time.Duration, key string) W1Result {
	var cycles, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(dur)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := key + "-" + strconv.Itoa(g)
			ctx := context.Background()
			for time.Now().Before(end) {
				unlock, err := m.Lock(ctx, k, false)
				if err != nil {
					errs.Add(1)
					continue
				}
				unlock()
				cycles.Add(1)
			}
		}()
	}
	wg.Wait()
	return W1Result{Cycles: cycles.Load(), Errors: errs.Load(), Dur: time.Since(start)}
}

// W2Result is the outcome of goroutines contending for one hot key.
type W2Result struct {
	Sections   int64           // completed before the end
	Errors     int64           // failed acquisitions other than at the cut-off
	Dur        time.Duration   // the measured window
	Waits      []time.Duration // per acquisition; at the cut-off, the wait so far
	PerG       []int64         // completions per goroutine
	SectionSum time.Duration   // total time spent inside sections
	Cmds       int64           // Redis commands sent (filled in by the caller)
}

// Merge adds o (another process's share of the same run) to r.
func (r *W2Result) Merge(o W2Result) {
	r.Sections += o.Sections
	r.Errors += o.Errors
	r.Dur = max(r.Dur, o.Dur)
	r.Waits = append(r.Waits, o.Waits...)
	r.PerG = append(r.PerG, o.PerG...)
	r.SectionSum += o.SectionSum
	r.Cmds += o.Cmds
}

// PerSec returns completed sections per second.
func (r W2Result) PerSec() float64 { return float64(r.Sections) / r.Dur.Seconds() }

// Ideal returns the most sections per second a perfect lock could complete:
// one over the measured mean section length (0 for empty sections).
func (r W2Result) Ideal() float64 {
	if r.Sections == 0 || r.SectionSum == 0 {
		return 0
	}
	return float64(r.Sections) / r.SectionSum.Seconds()
}

// Wait returns the q-quantile of the waits (0 ≤ q ≤ 1).
func (r W2Result) Wait(q float64) time.Duration {
	if len(r.Waits) == 0 {
		return 0
	}
	w := slices.Clone(r.Waits)
	slices.Sort(w)
	return w[min(len(w)-1, int(q*float64(len(w))))]
}

// Fairness returns min/max completions per goroutine.
func (r W2Result) Fairness() float64 {
	if len(r.PerG) == 0 {
		return 0
	}
	lo, hi := slices.Min(r.PerG), slices.Max(r.PerG)
	if hi == 0 {
		return 0
	}
	return float64(lo) / float64(hi)
}

// Jain returns Jain's fairness index of the completions per goroutine,
// (Σx)² / (n·Σx²): 1 when every goroutine completed as many sections as the
// others, 1/n when one completed them all, 0 when none completed any.
func (r W2Result) Jain() float64 {
	var sum, sq float64
	for _, n := range r.PerG {
		sum += float64(n)
		sq += float64(n) * float64(n)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(r.PerG)) * sq)
}

// RunW2 runs goroutines that take key (blocking), spend section inside and
// release, until dur has passed. Attempts still waiting then are cut off.
func RunW2(m Mutexer, goroutines int, section, dur time.Duration, key string) W2Result {
	start := time.Now()
	end := start.Add(dur)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	res := W2Result{PerG: make([]int64, goroutines)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var waits []time.Duration
			var n, errs int64
			var inside time.Duration
			for time.Now().Before(end) {
				t0 := time.Now()
				unlock, err := m.Lock(ctx, key, true)
				t1 := time.Now()
				waits = append(waits, t1.Sub(t0))
				if err != nil {
					// Failures at the cut-off (the deadline, or a wait that
					// ended with it) are not errors of the library.
					if ctx.Err() == nil && t1.Before(end) {
						errs++
					}
					continue
				}
				if section > 0 {
					time.Sleep(section)
				}
				t2 := time.Now()
				unlock()
				if t1.Before(end) {
					n++
					inside += t2.Sub(t1)
				}
			}
			mu.Lock()
			res.PerG[g] = n
			res.Sections += n
			res.Errors += errs
			res.Waits = append(res.Waits, waits...)
			res.SectionSum += inside
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Dur = dur
	return res
}

// W3Wait bounds how long one hand-over of W3 may take, holder's
// acquisition and waiter's wait together: a library that never hands over,
// or whose holder never gets the lock, fails the run instead of hanging it.
const W3Wait = 30 * time.Second

// RunW3Local measures hand-over latency inside one process: from the moment
// the holder calls unlock to the moment the blocked waiter holds the lock.
// The waiter is given settle time to block before each release.
func RunW3Local(holder, waiter Mutexer, n int, settle time.Duration, key string) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		d, err := handOverLocal(holder, waiter, settle, key)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// handOverLocal measures one hand-over of RunW3Local, within W3Wait.
func handOverLocal(holder, waiter Mutexer, settle time.Duration, key string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), W3Wait)
	defer cancel()
	unlock, err := holder.Lock(ctx, key, true)
	if err != nil {
		return 0, err
	}
	blocked := make(chan struct{})
	got := make(chan time.Time, 1)
	errc := make(chan error, 1)
	go func() {
		close(blocked)
		u, err := waiter.Lock(ctx, key, true)
		t := time.Now()
		if err != nil {
			errc <- err
			return
		}
		got <- t
		u()
	}()
	<-blocked
	time.Sleep(settle) // let the waiter block: this is the scenario, not synchronisation
	rel := time.Now()
	unlock()
	select {
	case t := <-got:
		return t.Sub(rel), nil
	case err := <-errc:
		return 0, err
	}
}

// Quantile returns the q-quantile of ds.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	w := slices.Clone(ds)
	slices.Sort(w)
	return w[min(len(w)-1, int(q*float64(len(w))))]
}
