package redisengine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/background"
	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// newLocker returns an Engine on its own client of b, closed at the end of the
// test. Lockers of one test share a prefix, so they contend for the same keys.
func newLocker(t *testing.T, b *redistest.Backend, prefix string, opt Options) *Engine {
	t.Helper()
	opt.Prefix = prefix
	l, err := New(b.Universal(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func mustKey(t testing.TB, parts ...string) lockcore.Key {
	t.Helper()
	k, err := lockcore.NewKey(parts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func inspect(t *testing.T, l *Engine, k lockcore.Key) lockcore.Info {
	t.Helper()
	info, err := l.Inspect(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// holdCount returns the Count of token's hold in info: 0 when token does
// not hold the lock.
func holdCount(info lockcore.Info, token string) int {
	for _, h := range info.Holders {
		if h.Owner == operate.OwnerDigest(token) {
			return h.Count
		}
	}
	return 0
}

// eventually polls cond until it holds or the bound passes.
// acquireAsync starts l.Acquire(key) with a wait and returns the channels
// its lease or error arrive on.
func acquireAsync(l *Engine, key lockcore.Key, wait time.Duration) (<-chan *lifecycle.Lease, <-chan error) {
	got := make(chan *lifecycle.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(context.Background(), key, lifecycle.Policy{Wait: wait})
		if err != nil {
			errc <- err
			return
		}
		got <- ls
	}()
	return got, errc
}

// awaitLease returns the lease from got within d, failing the test on an
// error or when none comes in time.
func awaitLease(t *testing.T, got <-chan *lifecycle.Lease, errc <-chan error, d time.Duration, what string) *lifecycle.Lease {
	t.Helper()
	select {
	case ls := <-got:
		return ls
	case err := <-errc:
		t.Fatalf("%s: %v", what, err)
	case <-time.After(d):
		t.Fatalf("%s: no lease within %v", what, d)
	}
	return nil
}

// subscribed waits until the subscriptions of e that would tell a waiter
// for k are in place, its shard channel's on a Cluster kept so until the
// test ends by a want of the test's own: a subscription coming up has its
// waiters ask again, which a test that counts wakes or calls must not
// meet.
func subscribed(t *testing.T, e *Engine, k lockcore.Key) {
	t.Helper()
	select {
	case <-e.nf.whenLive():
	case <-time.After(5 * time.Second):
		t.Fatal("the Engine's subscription was never established")
	}
	if sh := e.nf.sh; sh != nil {
		slot := slotOf(e.redisKeys(k)[0])
		sh.want(slot)
		t.Cleanup(func() { sh.unwant(slot) })
		eventually(t, 5*time.Second, "the Engine's shard subscription in place", func() bool { return sh.ready(slot) })
	}
}

func eventually(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	if !eventuallyOK(bound, cond) {
		t.Fatalf("not within %v: %s", bound, what)
	}
}

// eventuallyOK reports whether cond became true within bound, checking
// every few milliseconds; unlike eventually, it may run outside the test's
// goroutine.
func eventuallyOK(bound time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(bound); ; {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond) // polling a condition, bounded above
	}
}

func TestReentrancyAcrossLockers(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		a := newLocker(t, b, prefix, Options{})
		bl := newLocker(t, b, prefix, Options{})
		c := newLocker(t, b, prefix, Options{})
		key := mustKey(t, "productID", "42")
		ctx := context.Background()

		outer, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		// Another process that received the token re-enters.
		tok := outer.Token()
		inner, err := bl.Acquire(enginetest.WithToken(ctx, tok), key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatalf("re-entry with the holder's token: %v", err)
		}
		if inner.Fence() != outer.Fence() {
			t.Fatalf("re-entered fence %d, want the hold's %d", inner.Fence(), outer.Fence())
		}
		if info := inspect(t, a, key); holdCount(info, tok) != 2 || len(info.Holders) != 1 {
			t.Fatalf("holders = %v, want {token: 2}", info.Holders)
		}
		// A third owner does not get in.
		if _, err := c.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Fatalf("other owner: err = %v, want ErrNotAcquired", err)
		}
		// A token that holds nothing grants nothing.
		if _, err := c.Acquire(enginetest.WithToken(ctx, lifecycle.NewToken()), key, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Fatalf("foreign token: err = %v, want ErrNotAcquired", err)
		}
		if err := outer.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if info := inspect(t, a, key); holdCount(info, tok) != 1 {
			t.Fatalf("after outer release: holders = %v, want {token: 1}", info.Holders)
		}
		if _, err := c.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Fatalf("while inner holds: err = %v, want ErrNotAcquired", err)
		}
		if err := inner.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if info := inspect(t, a, key); len(info.Holders) > 0 {
			t.Fatalf("after both releases: %+v", info)
		}
		ls, err := c.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatalf("after release: %v", err)
		}
		if ls.Fence() <= outer.Fence() {
			t.Fatalf("fence %d not above %d", ls.Fence(), outer.Fence())
		}
		_ = ls.Release(ctx)
	})
}

func TestReentrancyInProcessSkipsRedis(t *testing.T) {
	b := redistest.Mini(t)
	c := b.Client(t)
	var n atomic.Int64
	c.AddHook(&countHook{n: &n})
	l, err := New(c, Options{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	key := mustKey(t, "k")
	ctx := context.Background()
	outer, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	before := n.Load()
	inner, err := l.Acquire(outer.Context(), key, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if d := n.Load() - before; d != 0 {
		t.Fatalf("nested acquire+release sent %d commands, want 0", d)
	}
	if err := inner.Release(ctx); !errors.Is(err, lockcore.ErrReleased) {
		t.Fatalf("second release: %v, want ErrReleased", err)
	}
	if len(inspect(t, l, key).Holders) == 0 {
		t.Fatal("inner release freed the outer hold")
	}
	if f, ok := enginetest.Fence(inner.Context()); !ok || f != outer.Fence() {
		t.Fatalf("fence = %d, %v; want %d", f, ok, outer.Fence())
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if len(inspect(t, l, key).Holders) > 0 {
		t.Fatal("still held after the outer release")
	}
	if _, ok := enginetest.Fence(outer.Context()); ok {
		t.Fatal("released context still reports a fencing token")
	}
}

func TestReleaseByWrongTokenLeavesLock(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		l := newLocker(t, b, redistest.Prefix(t), Options{})
		key := mustKey(t, "k")
		ctx := context.Background()
		ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		// A lease on the same key under another token, as a confused or
		// hostile caller would hold after the real one took over, believed
		// valid; and one under the right token with another entry.
		for _, tok := range []string{lifecycle.NewToken(), ls.Token()} {
			forged := l.newHold(key, tok, 0)
			forged.setEntry(l.nextID(time.Now()))
			forged.setValidUntil(time.Now().Add(time.Minute))
			if n, err := l.release(ctx, forged, ""); n != -1 || err != nil {
				t.Fatalf("release script by a stranger: %d %v, want -1", n, err)
			}
		}
		info := inspect(t, l, key)
		if holdCount(info, ls.Token()) != 1 || len(info.Holders) != 1 || info.TTL <= 0 {
			t.Fatalf("lock changed by a wrong-token release: %+v", info)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); !errors.Is(err, lockcore.ErrReleased) {
			t.Fatalf("double release: %v", err)
		}
	})
}

// TestExpiryFreesCrashedHolder: a holder whose process dies (its Engine stops
// renewing and never releases) frees the key when the TTL runs out, and a
// waiter then proceeds.
func TestExpiryFreesCrashedHolder(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		crashed := newLocker(t, b, prefix, Options{})
		l := newLocker(t, b, prefix, Options{})
		key := mustKey(t, "k")
		ctx := context.Background()
		const ttl = 300 * time.Millisecond
		held, err := crashed.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		_ = crashed.Close() // stops renewing; never releases
		start := time.Now()
		ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: 5 * time.Second})
		if err != nil {
			t.Fatalf("waiter after the holder crashed: %v", err)
		}
		waited := time.Since(start)
		if waited > ttl+time.Second {
			t.Fatalf("waited %v for a lock with TTL %v", waited, ttl)
		}
		if ls.Fence() <= held.Fence() {
			t.Fatalf("fence %d not above the crashed holder's %d", ls.Fence(), held.Fence())
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWatchdogKeepsLease holds a lease with a short TTL for 5×TTL while
// another owner keeps trying to get in.
func TestWatchdogKeepsLease(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		holder := newLocker(t, b, prefix, Options{})
		other := newLocker(t, b, prefix, Options{})
		key := mustKey(t, "k")
		ctx := context.Background()
		const ttl = 100 * time.Millisecond
		ls, err := holder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		end := time.Now().Add(5 * ttl)
		attempts := 0
		for time.Now().Before(end) {
			attempts++
			got, err := other.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
			if err == nil {
				_ = got.Release(ctx)
				t.Fatalf("another owner got in after %v", time.Since(end.Add(-5*ttl)))
			}
			if !errors.Is(err, lockcore.ErrNotAcquired) {
				t.Fatal(err)
			}
			select {
			case <-ls.Context().Done():
				t.Fatalf("lease ended: %v", ls.Err())
			case <-time.After(5 * time.Millisecond): // pacing of the intruder
			}
		}
		if attempts < 10 {
			t.Fatalf("only %d intrusion attempts", attempts)
		}
		if ls.Err() != nil {
			t.Fatalf("lease: %v", ls.Err())
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLostLeaseCancelsContext deletes a held key behind the holder's back;
// the holder must learn within one renewal interval.
func TestLostLeaseCancelsContext(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		l := newLocker(t, b, prefix, Options{})
		key := mustKey(t, "k")
		ctx := context.Background()
		const ttl = 300 * time.Millisecond
		ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Universal(t).Del(ctx, l.redisKeys(key)[0]).Err(); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		select {
		case <-ls.Context().Done():
		case <-time.After(ttl/3 + ttl/12 + 100*time.Millisecond):
			t.Fatalf("loss not reported within one renewal interval")
		}
		if cause := context.Cause(ls.Context()); !errors.Is(cause, lockcore.ErrLockLost) {
			t.Fatalf("cause = %v, want ErrLockLost", cause)
		}
		t.Logf("loss reported %v after the delete", time.Since(deleted))
		if !errors.Is(ls.Err(), lockcore.ErrLockLost) {
			t.Fatalf("Err = %v", ls.Err())
		}
		if err := ls.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
			t.Fatalf("release of a lost lease: %v, want ErrLockLost", err)
		}
	})
}

// TestFencingAcrossExpiry: tokens keep growing after the lock key expired,
// and after the fencing counter itself was lost (a restart without
// persistence).
func TestFencingAcrossExpiry(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		key := mustKey(t, "k")
		ctx := context.Background()
		rdb := b.Universal(t)
		var last int64
		for i := range 6 {
			l := newLocker(t, b, prefix, Options{})
			// Leases of 200ms: a grant answered with less than a tenth of
			// its lease left is refused as late; a 40ms lease was refused
			// once in CI, when an answer took over 36ms under the race
			// detector.
			ls, err := l.Acquire(ctx, key, lifecycle.Policy{TTL: 200 * time.Millisecond, Wait: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if ls.Fence() <= last {
				t.Fatalf("round %d: fence %d not above %d", i, ls.Fence(), last)
			}
			last = ls.Fence()
			// The counter is not kept forever: it expires within the
			// retention of its seeding, after the clock has passed it (a
			// token leads the clock by 100 us at most: 1 ms more).
			if d := rdb.PTTL(ctx, l.redisKeys(key)[2]).Val(); d <= 0 || d > l.opt.FenceRetention+time.Millisecond {
				t.Fatalf("round %d: fencing counter TTL %v, want within (0, %v]", i, d, l.opt.FenceRetention+time.Millisecond)
			}
			_ = l.Close() // the holder vanishes; the key expires
			if i%2 == 1 {
				rdb.Del(ctx, l.redisKeys(key)[2]) // counter lost too
			}
		}
	})
}

// TestCancelWhileWaiting: a waiter whose context ends leaves nothing held or
// queued, including when the hand-over races with the cancellation.
func TestCancelWhileWaiting(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		holder := newLocker(t, b, prefix, Options{})
		waiter := newLocker(t, b, prefix, Options{})
		key := mustKey(t, "k")
		bg := context.Background()

		ls, err := holder.Acquire(bg, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		go func() {
			_, err := waiter.Acquire(ctx, key, lifecycle.Policy{Wait: time.Minute})
			done <- err
		}()
		eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, holder, key).Waiters) == 1 })
		cancel()
		err = <-done
		if !errors.Is(err, context.Canceled) || !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Fatalf("err = %v, want context.Canceled and ErrNotAcquired", err)
		}
		if n := len(inspect(t, holder, key).Waiters); n != 0 {
			t.Fatalf("%d waiters left queued", n)
		}
		if err := ls.Release(bg); err != nil {
			t.Fatal(err)
		}
		if info := inspect(t, holder, key); len(info.Holders) > 0 {
			t.Fatalf("held after release: %+v", info)
		}

		// The race: release and cancellation at the same moment, many times.
		for i := range 100 {
			ls, err := holder.Acquire(bg, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(bg)
			done := make(chan error, 1)
			go func() {
				got, err := waiter.Acquire(ctx, key, lifecycle.Policy{Wait: time.Minute})
				if err == nil {
					err = got.Release(bg)
				}
				done <- err
			}()
			eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, holder, key).Waiters) == 1 })
			go cancel()
			if err := ls.Release(bg); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: %v", i, err)
			}
			cancel()
			if info := inspect(t, holder, key); (len(info.Holders) > 0) || len(info.Waiters) != 0 {
				t.Fatalf("round %d: left behind %+v", i, info)
			}
		}
	})
}

func TestFailFastAndWaitTimeout(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		a := newLocker(t, b, prefix, Options{})
		o := newLocker(t, b, prefix, Options{})
		key := mustKey(t, "k")
		ctx := context.Background()
		ls, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer ls.Release(ctx)
		_, err = o.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		var ce *lockcore.ContentionError
		if !errors.As(err, &ce) || !errors.Is(err, lockcore.ErrNotAcquired) || errors.Is(err, lockcore.ErrWaitTimeout) {
			t.Fatalf("fail fast: %v", err)
		}
		if ce.RetryAfter <= 0 || ce.RetryAfter > 5*time.Second {
			t.Fatalf("RetryAfter = %v", ce.RetryAfter)
		}
		_, err = o.Acquire(ctx, key, lifecycle.Policy{Wait: 50 * time.Millisecond})
		if !errors.Is(err, lockcore.ErrWaitTimeout) || !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Fatalf("wait: %v, want ErrWaitTimeout", err)
		}
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err = o.Acquire(dctx, key, lifecycle.Policy{Wait: time.Minute})
		if !errors.Is(err, lockcore.ErrWaitTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait bounded by the context deadline: %v", err)
		}
		if n := len(inspect(t, a, key).Waiters); n != 0 {
			t.Fatalf("%d waiters left queued", n)
		}
	})
}

// TestHandOffOrder: waiters get the lock in arrival order.
// Hand-over in memory is off: this is the order Redis keeps.
func TestHandOffOrder(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		lockers := []*Engine{newLocker(t, b, prefix, Options{LocalHandOvers: -1}), newLocker(t, b, prefix, Options{LocalHandOvers: -1})}
		key := mustKey(t, "k")
		ctx := context.Background()
		ls, err := lockers[0].Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		const n = 6
		order := make(chan int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := lockers[i%2].Acquire(ctx, key, lifecycle.Policy{Wait: 10 * time.Second})
				if err != nil {
					t.Error(err)
					return
				}
				order <- i
				_ = got.Release(ctx)
			}()
			eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, lockers[0], key).Waiters) == i+1 })
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(order)
		want := 0
		for i := range order {
			if i != want {
				t.Fatalf("waiter %d got the lock in place %d", i, want)
			}
			want++
		}
	})
}

// TestQueueOutlivesHolder: waiters queued behind a holder that crashed get
// the lock in arrival order once its lease runs out, and the first hands it
// to the second at release (the second would otherwise sleep past its wait,
// the first holder's lease being long).
func TestQueueOutlivesHolder(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		crashed := newLocker(t, b, prefix, Options{})
		a, c := newLocker(t, b, prefix, Options{}), newLocker(t, b, prefix, Options{})
		key := mustKey(t, "k")
		ctx := context.Background()
		first, err := crashed.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			ls  *lifecycle.Lease
			err error
		}
		got := make(chan result, 2)
		for i, l := range []*Engine{a, c} {
			go func() {
				ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: 3 * time.Second, TTL: 10 * time.Second})
				got <- result{ls, err}
			}()
			eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, a, key).Waiters) == i+1 })
		}
		_ = crashed.Close() // no renewals: the key expires with its lease
		r1 := <-got
		if r1.err != nil {
			t.Fatal(r1.err)
		}
		if holdOf(a, r1.ls) == nil || r1.ls.Fence() <= first.Fence() {
			t.Fatalf("first after the crash: locker a %v, fence %d after %d", holdOf(a, r1.ls) != nil, r1.ls.Fence(), first.Fence())
		}
		if err := r1.ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r2 := <-got
		if r2.err != nil {
			t.Fatalf("second waiter: %v", r2.err)
		}
		if r2.ls.Fence() <= r1.ls.Fence() {
			t.Fatalf("fence %d after %d", r2.ls.Fence(), r1.ls.Fence())
		}
		_ = r2.ls.Release(ctx)
		if info := inspect(t, a, key); (len(info.Holders) > 0) || len(info.Waiters) != 0 {
			t.Fatalf("left behind: %+v", info)
		}
	})
}

// countHook counts the commands a client sends (a pipeline counts each),
// leaving out the handshake of a new connection (HELLO, CLIENT ...).
type countHook struct {
	n     *atomic.Int64
	mu    sync.Mutex
	names []string // the counted commands' names, when recording
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "hello" && name != "client" && !background.Marked(ctx) {
			h.n.Add(1)
			h.mu.Lock()
			h.names = append(h.names, name)
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if name := cmd.Name(); name != "hello" && name != "client" && name != "select" && !background.Marked(ctx) {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestRoundTrips: an uncontended acquire is one command and so is a release;
// on Sentinel, where replicas acknowledge acquisitions by default, the
// acquire's WAIT goes with it, in one pipeline.
func TestRoundTrips(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		c := b.Universal(t)
		var n atomic.Int64
		hook := &countHook{n: &n}
		c.AddHook(hook)
		l, err := New(c, Options{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		// Warm up: the first use loads the scripts (EVALSHA, NOSCRIPT, EVAL),
		// on each master of a Cluster that the keys live on.
		for i := range 20 {
			ls, err := l.Acquire(ctx, mustKey(t, "k", string(rune('a'+i))), lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			_ = ls.Release(ctx)
		}
		want := int64(1)
		if b.Name == "sentinel" {
			want = 2 // and WAIT
		}
		for _, p := range []lifecycle.Policy{{}, {Wait: time.Second}} {
			for i := range 20 {
				key := mustKey(t, "k", string(rune('a'+i)))
				n.Store(0)
				ls, err := l.Acquire(ctx, key, p)
				if err != nil {
					t.Fatal(err)
				}
				if got := n.Load(); got != want {
					t.Fatalf("acquire (%+v) sent %d commands, want %d", p, got, want)
				}
				n.Store(0)
				hook.mu.Lock()
				hook.names = nil
				hook.mu.Unlock()
				if err := ls.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if got := n.Load(); got != 1 {
					hook.mu.Lock()
					defer hook.mu.Unlock()
					t.Fatalf("release sent %d commands %v, want 1", got, hook.names)
				}
			}
		}
	})
}

// TestErrReadsTheClock: once a lease's local validity has run out, Err
// reports it lost (and cancels its context) at once, even if the watchdog
// has not run yet — as when the scheduler delays it past the validity.
func TestErrReadsTheClock(t *testing.T) {
	b := redistest.Mini(t)
	l := newLocker(t, b, redistest.Prefix(t), Options{TTL: time.Minute, MaxTTL: time.Minute})
	ls, err := l.Acquire(context.Background(), mustKey(t, "clock"), lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(context.Background())
	if ls.Err() != nil {
		t.Fatalf("fresh lease: %v", ls.Err())
	}
	holdOf(l, ls).valid.Store(mono() - 1) // validity ran out; the watchdog is not due for 15s
	if err := ls.Err(); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("Err after the validity ran out: %v, want ErrLockLost", err)
	}
	select {
	case <-ls.Context().Done():
	default:
		t.Fatal("context not cancelled")
	}
	if !errors.Is(context.Cause(ls.Context()), lockcore.ErrLockLost) {
		t.Fatalf("cause %v", context.Cause(ls.Context()))
	}
}

// holdOf returns l's live hold that ls was made of, or nil when l has
// none: the one of its key and fence.
func holdOf(l *Engine, ls *lifecycle.Lease) *hold {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	for _, h := range l.wd.holds {
		if ls != nil && h.key == ls.Key() && h.fence == ls.Fence() {
			return h
		}
	}
	return nil
}
