//go:build long

package redisengine

import (
	"context"
	"errors"
	"flag"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

var (
	leadTrials = flag.Int("lead.trials", 16, "partition trials of TestLossLeadTime (the README's run: 240; 8 against miniredis unless set)")
	deadTrials = flag.Int("dead.trials", 8, "trials of each case of TestDeadWaiterCost (the README's run: 40; 4 against miniredis unless set)")
)

// defaultClient returns a client at go-redis's default options, as lock.New
// and the README build it, closed when the test ends.
func defaultClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// durations summarises ds (sorted in place) for a log line.
func durations(ds []time.Duration) string {
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))] }
	return "n=" + strconv.Itoa(len(ds)) + " min " + ds[0].String() + " p50 " + q(0.5).String() +
		" p90 " + q(0.9).String() + " p99 " + q(0.99).String() + " max " + ds[len(ds)-1].String()
}

// parallel runs trials of f, a few at a time, and collects what they return.
func parallel(t *testing.T, trials, workers int, f func(t *testing.T, i int) time.Duration) []time.Duration {
	var (
		mu   sync.Mutex
		out  []time.Duration
		wg   sync.WaitGroup
		next = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				d := f(t, i)
				mu.Lock()
				out = append(out, d)
				mu.Unlock()
			}
		}()
	}
	for i := range trials {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// TestLossLeadTime: a holder cut off from Redis (a partition: its
// connections stay open and hear nothing) learns that its lease is lost,
// by its context being cancelled, before another owner can acquire, with
// the client at go-redis's defaults (3 s timeouts, retries) and the
// partition starting at a random moment of the lease. Each trial measures
// the lead: from the cancellation to the moment the call by which another
// owner got the lock was sent. Every lead must be positive. The lead is a
// tenth of the TTL, 50 ms, less how late the process runs the holder's
// timer: the test runs alone in its package, four trials at a time, and a
// failed trial says how long the other owner's loop, in the same process,
// was kept from running.
func TestLossLeadTime(t *testing.T) {
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	prober := newLocker(t, b, prefix, Options{})
	const ttl = 500 * time.Millisecond
	leads := parallel(t, bareCount(b, *leadTrials, "lead.trials", 8), 4, func(t *testing.T, i int) time.Duration {
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))
		p := faultproxy.Start(t, b.Addr)
		holder, err := New(defaultClient(t, p.Addr), Options{Prefix: prefix})
		if err != nil {
			t.Error(err)
			return 0
		}
		defer holder.Close()
		key := mustKey(t, "lead", strconv.Itoa(i))
		ctx := context.Background()
		ls, err := holder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
		if err != nil {
			t.Error(err)
			return 0
		}
		cut := make(chan time.Time, 1)
		context.AfterFunc(ls.Context(), func() { cut <- time.Now() })
		sleepCtx(ctx, time.Duration(rng.Int64N(int64(ttl)))) // the random phase
		p.Blackhole(true)
		// Another owner tries every millisecond until it gets in.
		var got, last time.Time
		var stall time.Duration // the longest gap between two of its tries
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(3 * ttl); time.Now().Before(deadline); <-tick.C {
			sent := time.Now()
			if !last.IsZero() {
				stall = max(stall, sent.Sub(last))
			}
			last = sent
			if other, err := prober.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}); err == nil {
				got = sent
				_ = other.Release(ctx)
				break
			}
		}
		if got.IsZero() {
			t.Errorf("trial %d: nobody else got the lock within %v of the partition", i, 3*ttl)
			return 0
		}
		var cancelled time.Time
		select {
		case cancelled = <-cut:
		case <-time.After(time.Second):
			t.Errorf("trial %d: another owner got in and the holder's context is still live", i)
			return 0
		}
		if !errors.Is(context.Cause(ls.Context()), lockcore.ErrLockLost) {
			t.Errorf("trial %d: cause %v, want ErrLockLost", i, context.Cause(ls.Context()))
		}
		lead := got.Sub(cancelled)
		if lead <= 0 {
			t.Errorf("trial %d: another owner acquired %v before the holder's context was cancelled (its tries, 1 ms apart, were up to %v apart)", i, -lead, stall.Round(time.Millisecond))
		}
		p.Heal()
		_ = ls.Release(ctx)
		return lead
	})
	if len(leads) > 0 {
		t.Logf("lead of the loss signal over another owner's acquisition, TTL %v, default client: %s", ttl, durations(leads))
	}
}

// TestDeadWaiterCost: a waiter at the head of the queue whose process is
// gone delays the next live waiter by at most the claim window (default
// 1 s). "killed": Redis saw its connections close (its waiter is skipped
// at once). "vanished": its connections look alive and hear nothing (its
// grant lapses unclaimed). Each trial measures from the release to the
// live waiter holding. Clients at go-redis's defaults.
func TestDeadWaiterCost(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	b := redistest.Best(t)
	for _, kind := range []string{"killed", "vanished"} {
		t.Run(kind, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			holder := newLocker(t, b, prefix, Options{})
			live, err := New(defaultClient(t, b.Addr), Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = live.Close() })
			window := live.opt.ClaimWindow
			costs := parallel(t, bareCount(b, *deadTrials, "dead.trials", 4), 4, func(t *testing.T, i int) time.Duration {
				ctx := context.Background()
				key := mustKey(t, "dead", strconv.Itoa(i))
				p := faultproxy.Start(t, b.Addr)
				ghost, err := New(defaultClient(t, p.Addr), Options{Prefix: prefix})
				if err != nil {
					t.Error(err)
					return 0
				}
				defer ghost.Close()
				rdb := b.Client(t)
				ok := eventuallyOK(5*time.Second, func() bool {
					return rdb.PubSubNumSub(ctx, ghost.channel).Val()[ghost.channel] == 1
				})
				h, err := holder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil || !ok {
					t.Errorf("trial %d: holder: %v, ghost subscribed: %v", i, err, ok)
					return 0
				}
				ghostDone := make(chan struct{})
				ghostCtx, leave := context.WithCancel(ctx)
				defer leave()
				go func() {
					defer close(ghostDone)
					if ls, err := ghost.Acquire(ghostCtx, key, lifecycle.Policy{Wait: 5 * time.Second}); err == nil {
						_ = ls.Release(ctx)
					}
				}()
				if !eventuallyOK(5*time.Second, func() bool { return len(inspectOK(holder, key).Waiters) == 1 }) {
					t.Errorf("trial %d: ghost never queued", i)
					return 0
				}
				got, errc := acquireAsync(live, key, 10*time.Second)
				if !eventuallyOK(5*time.Second, func() bool { return len(inspectOK(holder, key).Waiters) == 2 }) {
					t.Errorf("trial %d: live waiter never queued", i)
					return 0
				}
				if kind == "killed" {
					p.Refuse(true)
					p.ResetAll()
					if !eventuallyOK(5*time.Second, func() bool {
						return rdb.PubSubNumSub(ctx, ghost.channel).Val()[ghost.channel] == 0
					}) {
						t.Errorf("trial %d: Redis still sees the killed Engine's subscription", i)
					}
				} else {
					p.Blackhole(true)
				}
				released := time.Now()
				if err := h.Release(ctx); err != nil {
					t.Errorf("trial %d: release: %v", i, err)
				}
				var cost time.Duration
				select {
				case ls := <-got:
					cost = time.Since(released)
					_ = ls.Release(ctx)
				case err := <-errc:
					t.Errorf("trial %d: live waiter: %v", i, err)
				case <-time.After(5 * time.Second):
					t.Errorf("trial %d: live waiter still waits 5 s after the release", i)
				}
				if cost > window {
					t.Errorf("trial %d: the %s waiter cost %v, more than the claim window %v", i, kind, cost, window)
				}
				leave() // the ghost's caller is gone too
				p.Close()
				<-ghostDone
				return cost
			})
			if len(costs) > 0 {
				t.Logf("%s waiter ahead: release to the next live waiter holding, claim window %v: %s", kind, window, durations(costs))
			}
		})
	}
}

// inspectOK is Inspect for goroutines other than the test's: a failed read
// reads as the zero Info.
func inspectOK(l *Engine, k lockcore.Key) lockcore.Info {
	info, _ := l.Inspect(context.Background(), k)
	return info
}

// bareCount is n, a number of trials, against a real redis-server; against
// miniredis at most bare, unless set on the command line, as bareDur.
func bareCount(b *redistest.Backend, n int, name string, bare int) int {
	if b.Real() || flagSet(name) {
		return n
	}
	return min(n, bare)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
