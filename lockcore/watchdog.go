package lockcore

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// watchdog renews every held lease of a Locker from one goroutine. A hold is
// due for renewal a quarter of its TTL after the call that last confirmed
// it was sent; the goroutine wakes a twelfth of a TTL after the earliest due
// hold and renews everything due by then in one pipeline, so renewals run at
// about TTL/3 and batch together.
//
// Each hold's validity is tracked on the local monotonic clock: TTL minus a
// tenth (the safety margin) from the moment its acquire or last successful
// renewal was sent. Redis cannot expire the key before then. When renewals
// fail (Redis unreachable) the hold is retried about every TTL/10 and
// declared lost when its validity runs out, before anyone else can take it.
type watchdog struct {
	l      *Locker
	mu     sync.Mutex
	holds  holdHeap
	wakeAt time.Time // when run wakes next unless poked
	closed bool
	wake   chan struct{}
	done   chan struct{}
}

func margin(ttl time.Duration) time.Duration { return ttl / 10 }

func (w *watchdog) start(l *Locker) {
	w.l = l
	w.wake = make(chan struct{}, 1)
	w.done = make(chan struct{})
	go w.run()
}

func (w *watchdog) stop() {
	<-w.done
}

// add schedules h, confirmed by a call sent at sent. It reports false when the
// watchdog has stopped.
func (w *watchdog) add(h *hold, sent time.Time) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false
	}
	h.setValidUntil(sent.Add(h.ttl - margin(h.ttl)))
	h.at = sent.Add(h.ttl / 4)
	heap.Push(&w.holds, h)
	// Wake the loop only when it would sleep past this hold's renewal: with
	// equal TTLs a new hold is due after those already scheduled, so taking
	// a lock does not cost a goroutine switch.
	early := h.at.Add(h.ttl / 12).Before(w.wakeAt)
	w.mu.Unlock()
	if early {
		w.poke()
	}
	return true
}

func (w *watchdog) remove(h *hold) {
	w.mu.Lock()
	if h.index >= 0 {
		heap.Remove(&w.holds, h.index)
	}
	w.mu.Unlock()
}

func (w *watchdog) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watchdog) run() {
	defer close(w.done)
	ctx := w.l.ctx
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*hold
	for {
		w.mu.Lock()
		now := time.Now()
		due = due[:0]
		for len(w.holds) > 0 && !w.holds[0].at.After(now) {
			due = append(due, heap.Pop(&w.holds).(*hold))
		}
		next := w.l.opt.TTL / 4 // idle: wake now and then, so adds need no poke
		if len(w.holds) > 0 {
			top := w.holds[0]
			next = top.at.Sub(now) + top.ttl/12
			if v := top.validUntil().Sub(now); v < next {
				next = v
			}
		}
		w.wakeAt = now.Add(next)
		w.mu.Unlock()

		if len(due) > 0 {
			w.renew(ctx, due)
			continue // renewing took time: look again before sleeping
		}
		timer.Reset(max(next, 0))
		select {
		case <-ctx.Done():
			w.shutdown()
			return
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// renew sends one renewal for each of due in a single pipeline and
// reschedules or loses each.
func (w *watchdog) renew(ctx context.Context, due []*hold) {
	now := time.Now()
	live := due[:0]
	deadline := now.Add(time.Hour)
	for _, h := range due {
		if !h.live() {
			continue
		}
		if !now.Before(h.validUntil()) {
			h.lose(errRanOut)
			continue
		}
		deadline = minTime(deadline, h.validUntil())
		live = append(live, h)
	}
	if len(live) == 0 {
		return
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := time.Now()
	cmds, err := w.pipeline(rctx, live)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Redis lost its script cache (restart, SCRIPT FLUSH): load, retry.
		if renewScript.Load(rctx, w.l.rdb).Err() == nil {
			sent = time.Now()
			cmds, _ = w.pipeline(rctx, live)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, h := range live {
		var ok int64
		var cerr error
		if cmds != nil {
			ok, cerr = cmds[i].Int64()
		} else {
			cerr = err
		}
		switch {
		case cerr == nil && ok == 1:
			h.setValidUntil(sent.Add(h.ttl - margin(h.ttl)))
			h.at = sent.Add(h.ttl / 4)
		case cerr == nil:
			h.lose(fmt.Errorf("%w: the key is gone or held by another owner", ErrLockLost))
			continue
		default:
			h.at = minTime(time.Now().Add(h.ttl/10), h.validUntil())
		}
		if h.live() && !w.closed {
			heap.Push(&w.holds, h)
		}
	}
}

func (w *watchdog) pipeline(ctx context.Context, hs []*hold) ([]*redis.Cmd, error) {
	p := w.l.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(hs))
	for i, h := range hs {
		cmds[i] = renewScript.EvalSha(ctx, p, h.keys[:1], h.token, ms(h.ttl))
	}
	_, err := p.Exec(ctx)
	return cmds, err
}

// shutdown loses every hold still scheduled: nobody renews them any more.
func (w *watchdog) shutdown() {
	w.mu.Lock()
	w.closed = true
	hs := w.holds
	w.holds = nil
	w.mu.Unlock()
	for _, h := range hs {
		h.index = -1
		h.lose(fmt.Errorf("%w: %w", ErrLockLost, ErrClosed))
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// holdHeap orders holds by the time the watchdog acts on them.
type holdHeap []*hold

func (q holdHeap) Len() int           { return len(q) }
func (q holdHeap) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q holdHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *holdHeap) Push(x any) {
	h := x.(*hold)
	h.index = len(*q)
	*q = append(*q, h)
}
func (q *holdHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.index = -1
	*q = old[:len(old)-1]
	return h
}
