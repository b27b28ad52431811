package locktest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Compile-time check: Engine is a lockcore.Engine, an Operator, a
// Gatekeeper and a Results.
var _ interface {
	lockcore.Engine
	lockcore.Operator
	lockcore.Gatekeeper
	lockcore.Results
} = (*locktest.Engine)(nil)

func key(t testing.TB, parts ...string) lockcore.Key {
	t.Helper()
	k, err := lockcore.NewKey(parts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// bounded returns a context that ends after a generous bound, so that a
// broken engine fails the test instead of hanging it.
func bounded(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func acquire(t testing.TB, e *locktest.Engine, ctx context.Context, k lockcore.Key, p lifecycle.Policy) *lifecycle.Lease {
	t.Helper()
	ls, err := e.Acquire(ctx, k, p)
	if err != nil {
		t.Fatalf("Acquire(%v, %+v): %v", k, p, err)
	}
	return ls
}

func release(t testing.TB, ls *lifecycle.Lease) {
	t.Helper()
	if err := ls.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func waitersAre(t testing.TB, e *locktest.Engine, k lockcore.Key, n int) {
	t.Helper()
	if err := e.Await(bounded(t), func() bool { return e.Waiters(k) == n }); err != nil {
		t.Fatalf("waiting for %d waiters on %v (have %d): %v", n, k, e.Waiters(k), err)
	}
}

func wantFree(t testing.TB, e *locktest.Engine, k lockcore.Key) {
	t.Helper()
	if fence, entries := e.Held(k); entries != 0 || fence != 0 {
		t.Fatalf("%v still held: fence %d, %d entries", k, fence, entries)
	}
	if n := e.Waiters(k); n != 0 {
		t.Fatalf("%v has %d waiters left", k, n)
	}
}

// TestMutualExclusion: 32 goroutines × 50 iterations increment a plain
// counter under the lock. -race reports any overlap, the final count shows
// lost updates, and the fencing tokens seen in order under the lock must
// strictly increase.
func TestMutualExclusion(t *testing.T) {
	const goroutines, iterations = 32, 50
	e := new(locktest.Engine)
	k := key(t, "counter", "1")
	ctx := bounded(t)
	var (
		counter int     // guarded by the lock under test only
		fences  []int64 // likewise
		wg      sync.WaitGroup
		errs    = make(chan error, goroutines)
	)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range iterations {
				ls, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: 10 * time.Second})
				if err != nil {
					errs <- err
					return
				}
				n := counter
				fences = append(fences, ls.Fence())
				counter = n + 1
				if err := ls.Release(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if counter != goroutines*iterations {
		t.Fatalf("counter = %d, want %d", counter, goroutines*iterations)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence %d after %d: not strictly increasing", fences[i], fences[i-1])
		}
	}
	wantFree(t, e, k)
}

// TestFIFO: waiters that queued one after the other get the lock in that
// order, each with the next fencing token.
func TestFIFO(t *testing.T) {
	const n = 6
	e := new(locktest.Engine)
	k := key(t, "fifo", "1")
	ctx := bounded(t)
	first := acquire(t, e, ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
	order := make(chan int, n)
	fences := make(chan int64, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: 10 * time.Second})
			if err != nil {
				errs <- err
				return
			}
			order <- i
			fences <- ls.Fence()
			errs <- ls.Release(context.Background())
		}()
		waitersAre(t, e, k, i+1) // i is queued before i+1 starts
	}
	release(t, first)
	wg.Wait()
	close(order)
	close(fences)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := 0
	for i := range order {
		if i != want {
			t.Fatalf("waiter %d got the lock in place %d", i, want)
		}
		want++
	}
	next := first.Fence() + 1
	for f := range fences {
		if f != next {
			t.Fatalf("fence %d, want %d", f, next)
		}
		next++
	}
	wantFree(t, e, k)
}

// TestFailFast: lockcore.FailFast on a held key fails at once with a ContentionError
// that matches ErrNotAcquired but not ErrWaitTimeout, with 100 ms as
// RetryAfter (no hold of the key ended yet), and queues nothing.
func TestFailFast(t *testing.T) {
	e := new(locktest.Engine)
	k := key(t, "ff", "1")
	holder := acquire(t, e, bounded(t), k, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 3 * time.Second})
	_, err := e.Acquire(bounded(t), k, lifecycle.Policy{Wait: lockcore.FailFast})
	var ce *lockcore.ContentionError
	if !errors.As(err, &ce) || !errors.Is(err, lockcore.ErrNotAcquired) || errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Fatalf("fail fast: %v", err)
	}
	if ce.Key != k.String() || ce.RetryAfter != 100*time.Millisecond || ce.TimedOut {
		t.Fatalf("ContentionError %+v", *ce)
	}
	if n := e.Waiters(k); n != 0 {
		t.Fatalf("%d waiters after a fail-fast attempt", n)
	}
	release(t, holder)
	wantFree(t, e, k)
}

// TestRetryAfterWithoutHistory: with no hold of the key ended yet, a
// refused caller is told to retry after 100 ms, not after the holder's
// TTL; once holds ended, after about as long as they lasted, and never
// more than the holder's TTL.
func TestRetryAfterWithoutHistory(t *testing.T) {
	e := new(locktest.Engine)
	k := key(t, "productID", "42")
	retryAfter := func(p lifecycle.Policy) time.Duration {
		t.Helper()
		_, err := e.Acquire(bounded(t), k, p)
		var ce *lockcore.ContentionError
		if !errors.As(err, &ce) {
			t.Fatalf("acquire of a held key with %+v: %v", p, err)
		}
		return ce.RetryAfter
	}
	holder := acquire(t, e, bounded(t), k, lifecycle.Policy{Wait: lockcore.FailFast})
	for _, p := range []lifecycle.Policy{{Wait: lockcore.FailFast}, {Wait: 30 * time.Millisecond}} {
		if d := retryAfter(p); d != 100*time.Millisecond {
			t.Fatalf("RetryAfter %v with %+v and no history, want 100ms", d, p)
		}
	}
	release(t, holder)
	holder = acquire(t, e, bounded(t), k, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 40 * time.Millisecond})
	if d := retryAfter(lifecycle.Policy{Wait: lockcore.FailFast}); d <= 0 || d > 40*time.Millisecond {
		t.Fatalf("RetryAfter %v after a hold of next to nothing, with a holder's TTL of 40ms", d)
	}
	release(t, holder)
	wantFree(t, e, k)
}

// TestWaitTimeout: a wait that runs out fails with TimedOut (ErrWaitTimeout)
// and leaves nothing queued; the holder keeps the lock.
func TestWaitTimeout(t *testing.T) {
	e := new(locktest.Engine)
	k := key(t, "wt", "1")
	holder := acquire(t, e, bounded(t), k, lifecycle.Policy{Wait: lockcore.FailFast})
	_, err := e.Acquire(bounded(t), k, lifecycle.Policy{Wait: 30 * time.Millisecond})
	var ce *lockcore.ContentionError
	if !errors.As(err, &ce) || !ce.TimedOut || !errors.Is(err, lockcore.ErrWaitTimeout) || ce.RetryAfter != 100*time.Millisecond {
		t.Fatalf("wait ran out: %v", err)
	}
	if n := e.Waiters(k); n != 0 {
		t.Fatalf("%d waiters after a timed-out wait", n)
	}
	if fence, _ := e.Held(k); fence != holder.Fence() || holder.Err() != nil {
		t.Fatalf("holder lost the lock: fence %d, Err %v", fence, holder.Err())
	}
	release(t, holder)
	wantFree(t, e, k)
}

// TestCancelLeavesNothing: a waiter whose context is cancelled, or whose
// deadline passes, returns the context's error joined to a
// ContentionError and leaves nothing queued; the release that follows
// frees the key for no one. A stress loop races a release (which grants the
// waiter) against the cancellation and checks nothing is left held.
func TestCancelLeavesNothing(t *testing.T) {
	e := new(locktest.Engine)
	k := key(t, "cancel", "1")
	holder := acquire(t, e, bounded(t), k, lifecycle.Policy{Wait: lockcore.FailFast})

	ctx, cancel := context.WithCancel(bounded(t))
	done := make(chan error, 1)
	go func() {
		_, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: time.Hour})
		done <- err
	}()
	waitersAre(t, e, k, 1)
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, lockcore.ErrNotAcquired) || errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if n := e.Waiters(k); n != 0 {
		t.Fatalf("%d waiters after cancel", n)
	}

	dctx, dcancel := context.WithTimeout(bounded(t), 30*time.Millisecond)
	defer dcancel()
	_, err = e.Acquire(dctx, k, lifecycle.Policy{Wait: time.Hour})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Fatalf("wait past the deadline: %v", err)
	}
	if n := e.Waiters(k); n != 0 {
		t.Fatalf("%d waiters after the deadline", n)
	}

	// A context already ended does not queue either.
	_, err = e.Acquire(ctx, k, lifecycle.Policy{Wait: time.Hour})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, lockcore.ErrNotAcquired) {
		t.Fatalf("ended context: %v", err)
	}
	release(t, holder)
	wantFree(t, e, k)

	// Release and cancellation at the same moment: whichever wins, the
	// waiter either holds the lock or nothing is left.
	for range 200 {
		holder := acquire(t, e, bounded(t), k, lifecycle.Policy{Wait: lockcore.FailFast})
		ctx, cancel := context.WithCancel(bounded(t))
		done := make(chan *lifecycle.Lease, 1)
		go func() {
			ls, _ := e.Acquire(ctx, k, lifecycle.Policy{Wait: time.Hour})
			done <- ls
		}()
		waitersAre(t, e, k, 1)
		go cancel()
		release(t, holder)
		if ls := <-done; ls != nil {
			release(t, ls)
		}
		cancel()
		wantFree(t, e, k)
	}
}

// TestReenter: a context holding the lock re-enters in memory (no backend
// entry); a context carrying the hold's token, as a propagated call does,
// re-enters as one more entry under the same token and fence; the key is
// freed only when the last entry is released. A token that holds nothing
// grants nothing.
func TestReenter(t *testing.T) {
	e := new(locktest.Engine)
	k := key(t, "re", "1")
	ctx := bounded(t)
	outer := acquire(t, e, ctx, k, lifecycle.Policy{Wait: -1})

	inner := acquire(t, e, outer.Context(), k, lifecycle.Policy{Wait: lockcore.FailFast})
	if inner.Fence() != outer.Fence() || inner.Token() != outer.Token() {
		t.Fatal("in-memory re-entry got another hold")
	}
	if _, entries := e.Held(k); entries != 1 {
		t.Fatalf("in-memory re-entry: %d entries, want 1", entries)
	}

	remote, err := lifecycle.Intake(ctx, "Routelock-Token", []string{lifecycle.Outbound(outer.Context())}, nil)
	if err != nil {
		t.Fatal(err)
	}
	byToken := acquire(t, e, remote, k, lifecycle.Policy{Wait: lockcore.FailFast})
	if byToken.Fence() != outer.Fence() || byToken.Token() != outer.Token() {
		t.Fatal("token re-entry got another hold")
	}
	if fence, entries := e.Held(k); entries != 2 || fence != outer.Fence() {
		t.Fatalf("token re-entry: fence %d, %d entries; want %d, 2", fence, entries, outer.Fence())
	}
	if f, ok := enginetest.Fence(byToken.Context()); !ok || f != outer.Fence() {
		t.Fatalf("fence of the token re-entry = %d, %v", f, ok)
	}

	stranger := enginetest.WithToken(ctx, lifecycle.NewToken())
	if _, err := e.Acquire(stranger, k, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
		t.Fatalf("a made-up token entered: %v", err)
	}

	release(t, inner)
	release(t, outer)
	if _, entries := e.Held(k); entries != 1 {
		t.Fatalf("after the outer release: %d entries, want 1 (the token re-entry)", entries)
	}
	if _, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
		t.Fatalf("the key was freed while a token entry held it: %v", err)
	}
	release(t, byToken)
	wantFree(t, e, k)

	// A token never takes a free lock: the fresh hold has a token of its own.
	ls := acquire(t, e, remote, k, lifecycle.Policy{Wait: lockcore.FailFast})
	if ls.Token() == outer.Token() || ls.Fence() <= outer.Fence() {
		t.Fatalf("a stale token took a free key under its own name: fence %d", ls.Fence())
	}
	release(t, ls)
	wantFree(t, e, k)
}

// TestLose: Lose cancels the contexts of all the hold's leases with a cause
// matching ErrLockLost before the key passes to the waiter, which gets a
// greater fencing token; releasing the lost leases reports ErrLockLost and
// does not touch the new hold.
func TestLose(t *testing.T) {
	e := new(locktest.Engine)
	k := key(t, "lose", "1")
	ctx := bounded(t)
	ls := acquire(t, e, ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
	byToken := acquire(t, e, enginetest.WithToken(ctx, ls.Token()), k, lifecycle.Policy{Wait: lockcore.FailFast})
	derived, cancel := context.WithCancel(ls.Context())
	defer cancel()

	got := make(chan *lifecycle.Lease, 1)
	go func() {
		next, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: time.Hour})
		if err != nil {
			t.Error(err)
		}
		got <- next
	}()
	waitersAre(t, e, k, 1)

	if e.Lose(lockcore.Key{}) {
		t.Fatal("Lose of a key never held reported a hold")
	}
	if !e.Lose(k) {
		t.Fatal("Lose found no hold")
	}
	for name, c := range map[string]context.Context{"lease": ls.Context(), "token re-entry": byToken.Context(), "derived": derived} {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: context not cancelled by Lose", name)
		}
		if cause := context.Cause(c); !errors.Is(cause, lockcore.ErrLockLost) {
			t.Fatalf("%s: cause %v, want ErrLockLost", name, cause)
		}
	}
	if !errors.Is(ls.Err(), lockcore.ErrLockLost) {
		t.Fatalf("Err after Lose: %v", ls.Err())
	}
	if _, ok := enginetest.Fence(ls.Context()); ok {
		t.Fatal("a lost lease's context still reports a fencing token")
	}
	next := <-got
	if next == nil {
		t.FailNow()
	}
	if next.Fence() <= ls.Fence() {
		t.Fatalf("fence after loss %d, not above %d", next.Fence(), ls.Fence())
	}
	if err := ls.Release(context.Background()); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("Release of a lost lease: %v", err)
	}
	if err := byToken.Release(context.Background()); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("Release of a lost token entry: %v", err)
	}
	if fence, entries := e.Held(k); fence != next.Fence() || entries != 1 {
		t.Fatalf("the new hold was touched: fence %d, %d entries", fence, entries)
	}
	// A lost hold is not re-entered in memory.
	if _, err := e.Acquire(ls.Context(), k, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
		t.Fatalf("re-entry of a lost hold: %v", err)
	}
	release(t, next)
	wantFree(t, e, k)
	if e.Lose(k) {
		t.Fatal("Lose of a free key reported a hold")
	}
}

// TestValidation: a zero key, a TTL below 30ms and a negative wait other
// than FailFast are refused, matching ErrInvalidKey and ErrMisconfigured,
// and hold nothing.
func TestValidation(t *testing.T) {
	e := new(locktest.Engine)
	k := key(t, "v", "1")
	ctx := bounded(t)
	if _, err := e.Acquire(ctx, lockcore.Key{}, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrInvalidKey) {
		t.Fatalf("zero key: %v", err)
	}
	for _, p := range []lifecycle.Policy{{TTL: time.Millisecond}, {TTL: -time.Second}, {Wait: -2}, {Wait: -time.Second}} {
		if _, err := e.Acquire(ctx, k, p); !errors.Is(err, lockcore.ErrMisconfigured) {
			t.Fatalf("%+v: %v, want ErrMisconfigured", p, err)
		}
	}
	wantFree(t, e, k)
	release(t, acquire(t, e, ctx, k, lifecycle.Policy{Wait: time.Second, TTL: 30 * time.Millisecond}))
	wantFree(t, e, k)
}

// TestAwait: Await returns once its condition holds and with ctx's error
// when it never does.
func TestAwait(t *testing.T) {
	e := new(locktest.Engine)
	k := key(t, "await", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := e.Await(ctx, func() bool { return e.Waiters(k) == 1 }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Await of a condition that never holds: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- e.Await(bounded(t), func() bool { _, n := e.Held(k); return n == 1 })
	}()
	ls := acquire(t, e, bounded(t), k, lifecycle.Policy{Wait: lockcore.FailFast})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	release(t, ls)
}

// revokingFirst is an Engine that, once it has taken its last key, revokes
// the first: a lease lost while AcquireAll takes the others.
type revokingFirst struct {
	lifecycle.Locker // the engine's
	engine           *locktest.Engine
	first, last      lockcore.Key
}

func (e revokingFirst) Acquire(ctx context.Context, k lockcore.Key, p lifecycle.Policy) (*lifecycle.Lease, error) {
	ls, err := e.Locker.Acquire(ctx, k, p)
	if err == nil && k == e.last {
		if _, err := e.engine.Revoke(context.Background(), e.first, "test"); err != nil {
			return nil, err
		}
	}
	return ls, err
}

// TestAcquireAllLostMeanwhile: a set one of whose leases was lost while
// the others were taken is not handed out: AcquireAll fails as contention
// on that key, with the loss (ErrRevoked here), and holds nothing.
func TestAcquireAllLostMeanwhile(t *testing.T) {
	inner := new(locktest.Engine)
	a, b := key(t, "lost", "a"), key(t, "lost", "b")
	e := revokingFirst{Locker: inner.Locker(), engine: inner, first: a, last: b}
	ls, err := lifecycle.AcquireAll(bounded(t), e, []lockcore.Key{a, b}, lifecycle.Policy{Wait: lockcore.FailFast})
	if err == nil {
		t.Fatalf("AcquireAll returned a set whose lease on a was revoked meanwhile (a: %v)", ls[0].Err())
	}
	var ce *lockcore.ContentionError
	if !errors.As(err, &ce) || ce.Key != a.String() || !errors.Is(err, lockcore.ErrRevoked) || !errors.Is(err, lockcore.ErrNotAcquired) {
		t.Fatalf("AcquireAll with a lost meanwhile: %v, want a *ContentionError on a matching ErrNotAcquired and ErrRevoked", err)
	}
	for _, k := range []lockcore.Key{a, b} {
		release(t, acquire(t, inner, bounded(t), k, lifecycle.Policy{Wait: lockcore.FailFast}))
	}
}
