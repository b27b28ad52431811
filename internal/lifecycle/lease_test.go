package lifecycle

// Tests of the backend-neutral lease: the lease's context is the held
// struct (a cancelable context with a Value override), made by begin,
// newLease and lose, on which Serve makes the leases of every Backend.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routelock/lock/lockcore"
)

const testBound = 5 * time.Second

// testHold is a Taken that is held until told otherwise.
type testHold struct {
	fence    int64
	lost     atomic.Bool
	releases atomic.Int32
	err      error // what Release returns
}

func (h *testHold) Fence() int64          { return h.fence }
func (h *testHold) Shared() (int, bool)   { return -1, false }
func (h *testHold) Token() string         { return "" }
func (h *testHold) Done() <-chan struct{} { return nil }

var errTestGone = fmt.Errorf("%w: test: gone", lockcore.ErrLockLost)

func (h *testHold) Err() error {
	if h.lost.Load() {
		return errTestGone
	}
	return nil
}

func (h *testHold) Release(context.Context, error) error {
	h.releases.Add(1)
	return h.err
}

// testEngine takes its holds as a Core does, with begin and newLease,
// and keeps the last one for the test to lose. It never contends: tests
// use one owner.
type testEngine struct {
	ev    lockcore.Events // given to newLease
	c     Core            // the Core its leases name
	mu    sync.Mutex
	fence int64
	last  *testHold
}

func (e *testEngine) core() *Core { return &e.c }

func (e *testEngine) Acquire(ctx context.Context, key lockcore.Key, p Policy) (*Lease, error) {
	if ls, _, err := begin(ctx, e, key, p); ls != nil || err != nil {
		return ls, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fence++
	e.last = &testHold{fence: e.fence}
	return newLease(ctx, e.core(), key, NewToken(), e.last, e.ev), nil
}

func testKey(t *testing.T) lockcore.Key {
	t.Helper()
	k, err := lockcore.NewKey("productID", "42")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func waitDone(t *testing.T, what string, c context.Context) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(testBound):
		t.Fatalf("%s: not cancelled", what)
	}
}

// TestHeldContextDerivations: contexts derived from a lease's context
// in every way the context package offers (WithCancel, WithCancelCause,
// WithTimeout, WithDeadline, WithValue, AfterFunc) start no goroutine, and
// a lost lease cancels them all with its cause; context.WithoutCancel of
// the lease's context is not cancelled and, once the hold is lost, carries
// neither fencing token, held key nor owner token. The lease then reports
// the loss (Err, Release) and the hold is released in the backend once.
func TestHeldContextDerivations(t *testing.T) {
	e := &testEngine{}
	k := testKey(t)
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	ls, err := e.Acquire(parent, k, Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	hold := e.last
	lctx := ls.Context()
	if context.Cause(lctx) != nil || lctx.Err() != nil {
		t.Fatalf("fresh lease's context: err %v cause %v", lctx.Err(), context.Cause(lctx))
	}

	before := runtime.NumGoroutine()
	var derived []context.Context
	var cancels []func()
	afterRan := make(chan struct{}, 20)
	for i := range 100 {
		var c context.Context
		var cancel func()
		switch i % 5 {
		case 0:
			c, cancel = context.WithCancel(lctx)
		case 1:
			var cc context.CancelCauseFunc
			c, cc = context.WithCancelCause(lctx)
			cancel = func() { cc(nil) }
		case 2:
			c, cancel = context.WithTimeout(lctx, time.Hour)
		case 3:
			c, cancel = context.WithDeadline(context.WithValue(lctx, struct{ n int }{i}, i), time.Now().Add(time.Hour))
		case 4:
			c = context.WithValue(lctx, struct{ n int }{i}, i)
			stop := context.AfterFunc(c, func() { afterRan <- struct{}{} })
			cancel = func() { stop() }
		}
		derived = append(derived, c)
		cancels = append(cancels, cancel)
	}
	if extra := runtime.NumGoroutine() - before; extra > 0 {
		t.Errorf("deriving 100 contexts from the lease's context started %d goroutines", extra)
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	for i, c := range derived {
		if f, ok := fenceOf(c); !ok || f != ls.Fence() {
			t.Fatalf("derived context %d: fence %d %v, want %d", i, f, ok, ls.Fence())
		}
	}
	detached := context.WithoutCancel(lctx)
	if f, ok := fenceOf(detached); !ok || f != ls.Fence() {
		t.Errorf("WithoutCancel of the lease's context while held: fence %d %v", f, ok)
	}

	if !loseLease(ls, errTestGone) {
		t.Fatal("Lose: the hold was not live")
	}
	for i, c := range derived {
		waitDone(t, fmt.Sprintf("derived context %d", i), c)
		if cause := context.Cause(c); !errors.Is(cause, lockcore.ErrLockLost) {
			t.Errorf("derived context %d: cause %v, want ErrLockLost", i, cause)
		}
	}
	for range 20 {
		select {
		case <-afterRan:
		case <-time.After(testBound):
			t.Fatal("an AfterFunc on a derived context did not run")
		}
	}
	if detached.Err() != nil {
		t.Errorf("WithoutCancel of the lease's context was cancelled: %v", detached.Err())
	}
	if _, ok := fenceOf(detached); ok {
		t.Error("WithoutCancel of a lost lease's context still has a fencing token")
	}
	if h := HeldFrom(detached); len(h) != 0 {
		t.Errorf("WithoutCancel of a lost lease's context still holds %v", h)
	}
	if toks := TokensFrom(detached); len(toks) != 0 {
		t.Errorf("WithoutCancel of a lost lease's context still carries an owner token (%d bytes)", len(toks[0]))
	}
	if err := ls.Err(); !errors.Is(err, lockcore.ErrLockLost) {
		t.Errorf("Err after loss: %v", err)
	}
	if err := ls.Release(context.Background()); !errors.Is(err, lockcore.ErrLockLost) {
		t.Errorf("Release after loss: %v, want ErrLockLost", err)
	}
	if n := hold.releases.Load(); n != 1 {
		t.Errorf("the backend release ran %d times, want 1", n)
	}
}

// TestCheckLosesAndReentry: a Hold whose Check fails is lost by the
// next Err or re-entry, which cancels the lease's context with the
// engine's cause; in-memory re-entries share one backend release, which
// runs only with the last lease, whatever the order of the releases.
func TestCheckLosesAndReentry(t *testing.T) {
	e := &testEngine{}
	k := testKey(t)
	ctx := context.Background()

	outer, _ := e.Acquire(ctx, k, Policy{Wait: lockcore.FailFast})
	hold := e.last
	inner, _ := e.Acquire(outer.Context(), k, Policy{Wait: lockcore.FailFast})
	if e.last != hold || inner.Fence() != outer.Fence() {
		t.Fatal("nested acquisition did not re-enter in memory")
	}
	// Outer released first: the hold lives on with the inner lease.
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if outer.Context().Err() != nil || hold.releases.Load() != 0 {
		t.Fatalf("releasing one of two leases ended the hold: ctx %v, backend releases %d", outer.Context().Err(), hold.releases.Load())
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(outer.Context()), lockcore.ErrReleased) || hold.releases.Load() != 1 {
		t.Fatalf("after both releases: cause %v, backend releases %d", context.Cause(outer.Context()), hold.releases.Load())
	}
	if err := inner.Release(ctx); !errors.Is(err, lockcore.ErrReleased) {
		t.Errorf("second Release: %v", err)
	}

	ls, _ := e.Acquire(ctx, k, Policy{Wait: lockcore.FailFast})
	hold = e.last
	d, cancel := context.WithCancel(ls.Context())
	defer cancel()
	hold.lost.Store(true)
	// Re-entry asks the engine (Check) and, finding it unsure, loses the hold.
	again, _ := e.Acquire(d, k, Policy{Wait: lockcore.FailFast})
	if e.last == hold {
		t.Error("re-entered a hold whose Check fails")
	}
	_ = again.Release(ctx)
	waitDone(t, "context derived from a hold that failed its Check", d)
	if cause := context.Cause(d); !errors.Is(cause, errTestGone) {
		t.Errorf("cause %v, want the engine's", cause)
	}
	if err := ls.Err(); !errors.Is(err, lockcore.ErrLockLost) {
		t.Errorf("Err: %v", err)
	}
	_ = ls.Release(ctx)
}

// ending is one call of Events.Ended.
type ending struct {
	ctx           context.Context
	done          bool // ctx had ended when Ended was called
	held, release time.Duration
	cause, err    error
}

// endings is a Events that keeps what Ended is told.
type endings struct {
	mu   sync.Mutex
	got  []ending
	slow bool // Ended sleeps a little, to widen races
	// If set, Ended of a loss sends on entered and then waits for proceed
	// to be closed.
	entered, proceed chan struct{}
}

func (r *endings) Waiting(lockcore.Key, int)   {}
func (r *endings) Woken(lockcore.Key, string)  {}
func (r *endings) Renewed(lockcore.Key, error) {}
func (r *endings) take() []ending {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}
func (r *endings) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.got) }
func (r *endings) Ended(ctx context.Context, _ lockcore.Key, held, release time.Duration, cause, err error) {
	if r.slow {
		time.Sleep(20 * time.Microsecond)
	}
	if r.entered != nil && cause != lockcore.ErrReleased {
		r.entered <- struct{}{}
		<-r.proceed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, ending{ctx, ctx.Err() != nil, held, release, cause, err})
}

// TestEndedOncePerHold: the Events given to newLease hear of each fresh
// hold's end once, from lockcore: a release after its backend release
// returned (the release's context, ErrReleased), not an in-memory
// re-entry's; a loss before the lease's context is cancelled (the lease's
// context, no release time), and nothing more at its Release; a hold
// whose backend release found it revoked as a loss with that cause; and
// nothing of a hold given back before its lease was handed out (Lose with
// a cause that is no loss).
func TestEndedOncePerHold(t *testing.T) {
	ev := &endings{}
	e := &testEngine{ev: ev}
	k := testKey(t)
	type rctxKey struct{}
	rctx := context.WithValue(context.Background(), rctxKey{}, "release")

	ls, _ := e.Acquire(context.Background(), k, Policy{Wait: lockcore.FailFast})
	in, _ := e.Acquire(ls.Context(), k, Policy{Wait: lockcore.FailFast})
	if err := in.Release(rctx); err != nil {
		t.Fatal(err)
	}
	if got := ev.take(); len(got) != 0 {
		t.Fatalf("Ended of an in-memory re-entry's release: %+v", got)
	}
	if err := ls.Release(rctx); err != nil {
		t.Fatal(err)
	}
	if got := ev.take(); len(got) != 1 || got[0].cause != lockcore.ErrReleased || got[0].err != nil || got[0].ctx != rctx || got[0].held < 0 || got[0].release < 0 {
		t.Fatalf("Ended of a release: %+v, want once, ErrReleased, the release's context", got)
	}

	ls, _ = e.Acquire(context.Background(), k, Policy{Wait: lockcore.FailFast})
	if !loseLease(ls, errTestGone) {
		t.Fatal("Lose: not live")
	}
	if got := ev.take(); len(got) != 1 || got[0].cause != errTestGone || got[0].err != nil || got[0].ctx != ls.Context() || got[0].done || got[0].release != 0 {
		t.Fatalf("Ended of a loss: %+v, want once, the cause, the lease's live context", got)
	}
	if err := ls.Release(rctx); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("Release of a lost lease: %v", err)
	}
	if got := ev.take(); len(got) != 0 {
		t.Fatalf("Ended at the release of a lost lease: %+v", got)
	}

	// Lost by a failing Check, found by Err.
	ls, _ = e.Acquire(context.Background(), k, Policy{Wait: lockcore.FailFast})
	e.last.lost.Store(true)
	if err := ls.Err(); !errors.Is(err, errTestGone) {
		t.Fatalf("Err: %v", err)
	}
	_ = ls.Release(rctx)
	if got := ev.take(); len(got) != 1 || got[0].cause != errTestGone || got[0].done {
		t.Fatalf("Ended of a hold whose Check failed: %+v", got)
	}

	ls, _ = e.Acquire(context.Background(), k, Policy{Wait: lockcore.FailFast})
	revoked := fmt.Errorf("%w: test", lockcore.ErrRevoked)
	e.last.err = revoked
	if err := ls.Release(rctx); err != revoked {
		t.Fatalf("Release: %v, want the hold's", err)
	}
	if got := ev.take(); len(got) != 1 || got[0].cause != revoked || got[0].err != nil || got[0].ctx != rctx {
		t.Fatalf("Ended of a hold found revoked at its release: %+v", got)
	}

	ls, _ = e.Acquire(context.Background(), k, Policy{Wait: lockcore.FailFast})
	if !loseLease(ls, lockcore.ErrClosed) {
		t.Fatal("Lose: not live")
	}
	_ = ls.Release(context.Background())
	if got := ev.take(); len(got) != 0 {
		t.Fatalf("Ended of a hold given back before it was handed out: %+v", got)
	}
	if n := e.last.releases.Load(); n != 1 {
		t.Fatalf("a hold given back was released %d times in the backend, want 1", n)
	}
}

// TestEndedLoseRacesRelease: a loss races the Release of the hold's last
// lease, or of an in-memory re-entry while the outer lease still holds it;
// Events hears of the hold's end exactly once, and a Release has returned
// only once the end was told (the loss, when it returns the loss).
func TestEndedLoseRacesRelease(t *testing.T) {
	ev := &endings{slow: true}
	e := &testEngine{ev: ev}
	k := testKey(t)
	ctx := context.Background()
	var lost, released int
	for i := range 400 {
		ls, _ := e.Acquire(ctx, k, Policy{Wait: lockcore.FailFast})
		racer := ls
		if i%2 == 1 {
			racer, _ = e.Acquire(ls.Context(), k, Policy{Wait: lockcore.FailFast})
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			loseLease(ls, errTestGone)
		}()
		var err error
		var told int
		go func() {
			defer wg.Done()
			<-start
			err = racer.Release(ctx)
			told = ev.count()
		}()
		close(start)
		wg.Wait()
		if errors.Is(err, lockcore.ErrLockLost) && told != 1 {
			t.Fatalf("Release returned %v with Ended told %d times", err, told)
		}
		if racer != ls {
			if err != nil && !errors.Is(err, lockcore.ErrLockLost) {
				t.Fatalf("Release of the re-entry: %v", err)
			}
			err = ls.Release(ctx)
			told = ev.count()
		}
		got := ev.take()
		if len(got) != 1 || told != 1 {
			t.Fatalf("Ended %d times for one hold (%d when its Release returned): %+v", len(got), told, got)
		}
		switch {
		case errors.Is(err, lockcore.ErrLockLost):
			lost++
			if got[0].cause != errTestGone || got[0].done || got[0].release != 0 {
				t.Fatalf("Ended of a loss %+v", got[0])
			}
		case err == nil:
			released++
			if got[0].cause != lockcore.ErrReleased || got[0].err != nil {
				t.Fatalf("Ended of a release %+v", got[0])
			}
		default:
			t.Fatalf("Release: %v", err)
		}
	}
	t.Logf("%d lost, %d released", lost, released)
}

// TestEndedLossBeforeRelease: a Release that finds its hold lost by a
// loss still being told (Events.Ended has not returned) waits for it,
// whether it is the hold's last lease or an in-memory re-entry's.
func TestEndedLossBeforeRelease(t *testing.T) {
	for _, reentry := range []bool{false, true} {
		ev := &endings{entered: make(chan struct{}), proceed: make(chan struct{})}
		e := &testEngine{ev: ev}
		ctx := context.Background()
		ls, _ := e.Acquire(ctx, testKey(t), Policy{Wait: lockcore.FailFast})
		racer := ls
		if reentry {
			racer, _ = e.Acquire(ls.Context(), testKey(t), Policy{Wait: lockcore.FailFast})
		}
		go loseLease(ls, errTestGone)
		<-ev.entered
		returned := make(chan error, 1)
		go func() { returned <- racer.Release(ctx) }()
		select {
		case err := <-returned:
			t.Fatalf("re-entry %v: Release returned %v while its loss was being told", reentry, err)
		case <-time.After(50 * time.Millisecond):
		}
		close(ev.proceed)
		if err := <-returned; !errors.Is(err, errTestGone) {
			t.Fatalf("re-entry %v: Release: %v, want the loss", reentry, err)
		}
		if reentry {
			_ = ls.Release(ctx)
		}
		if got := ev.take(); len(got) != 1 || got[0].cause != errTestGone {
			t.Fatalf("re-entry %v: Ended %+v, want once, the loss", reentry, got)
		}
	}
}

// TestLimitHold: a hold given a ceiling by limitHold is lost with
// ErrMaxHold when it has lasted that long, and released in the backend
// then, once, while its leases are still out; their Release reports the
// cause and releases nothing more. A hold released before its ceiling is
// released once, and the ceiling ends nothing after. A re-entered lease
// adds no ceiling of its own.
func TestLimitHold(t *testing.T) {
	e := &testEngine{}
	ctx := context.Background()
	ls, err := e.Acquire(ctx, testKey(t), Policy{})
	if err != nil {
		t.Fatal(err)
	}
	h := e.last
	in, err := e.Acquire(ls.Context(), testKey(t), Policy{})
	if err != nil || !in.Reentered() {
		t.Fatalf("re-entry: %v", err)
	}
	limitHold(in, time.Millisecond) // a re-entry: no ceiling
	const ceiling = 50 * time.Millisecond
	start := time.Now()
	limitHold(ls, ceiling)
	waitDone(t, "the hold past its ceiling", ls.Context())
	if held := time.Since(start); held < ceiling {
		t.Fatalf("ended after %v, before its ceiling %v: the re-entry's 1 ms ceiling counted", held, ceiling)
	}
	cause := context.Cause(in.Context())
	if !errors.Is(cause, lockcore.ErrMaxHold) || !errors.Is(cause, lockcore.ErrLockLost) || !strings.Contains(cause.Error(), "50ms") {
		t.Fatalf("cause %v: want ErrMaxHold, ErrLockLost, and the ceiling", cause)
	}
	deadline := time.Now().Add(testBound)
	for h.releases.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // a bounded poll of the backend release the ceiling sends
	}
	if n := h.releases.Load(); n != 1 {
		t.Fatalf("released %d times in the backend at the ceiling, want 1", n)
	}
	for _, l := range []*Lease{in, ls} {
		if err := l.Release(ctx); !errors.Is(err, lockcore.ErrMaxHold) {
			t.Errorf("Release: %v, want ErrMaxHold", err)
		}
	}
	if n := h.releases.Load(); n != 1 {
		t.Fatalf("released %d times in the backend in all, want 1", n)
	}

	ls, err = e.Acquire(ctx, testKey(t), Policy{})
	if err != nil {
		t.Fatal(err)
	}
	h = e.last
	limitHold(ls, 20*time.Millisecond)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	after := time.NewTimer(60 * time.Millisecond) // past the ceiling: it must end nothing
	<-after.C
	if n := h.releases.Load(); n != 1 || !errors.Is(context.Cause(ls.Context()), lockcore.ErrReleased) {
		t.Fatalf("released %d times, cause %v: want once, ErrReleased", n, context.Cause(ls.Context()))
	}
}

func TestPolicyMaxHold(t *testing.T) {
	if err := (Policy{MaxHold: -time.Second}).Validate(); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Errorf("a negative MaxHold: %v", err)
	}
	p := Policy{Wait: time.Second}.Or(Policy{MaxHold: time.Minute})
	if p.MaxHold != time.Minute || p.Wait != time.Second {
		t.Errorf("Or: %+v", p)
	}
}

// TestLimitHoldRacesRelease: a ceiling that falls due as the last lease is
// released ends the hold once either way: Events.Ended is told once, with
// ErrMaxHold or ErrReleased, and the backend release runs once.
func TestLimitHoldRacesRelease(t *testing.T) {
	ev := &endings{}
	e := &testEngine{ev: ev}
	ctx := context.Background()
	var ceilings, releases int
	for i := range 300 {
		ls, err := e.Acquire(ctx, testKey(t), Policy{})
		if err != nil {
			t.Fatal(err)
		}
		h := e.last
		limitHold(ls, 20*time.Microsecond)
		// Release from at once to well past the ceiling: busy, since a
		// sleep is coarser than the race.
		for t0 := time.Now(); time.Since(t0) < time.Duration(i%200)*time.Microsecond; {
		}
		err = ls.Release(ctx)
		got := ev.take()
		// The ceiling's own backend release may still be on its way.
		deadline := time.Now().Add(testBound)
		for len(got) == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // a bounded poll of what the timer's goroutine tells
			got = append(got, ev.take()...)
		}
		for h.releases.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if len(got) != 1 || h.releases.Load() != 1 {
			t.Fatalf("try %d: Ended told %d times (%v), released %d times; want once each", i, len(got), got, h.releases.Load())
		}
		switch c := got[0].cause; {
		case errors.Is(c, lockcore.ErrMaxHold) && errors.Is(err, lockcore.ErrMaxHold):
			ceilings++
		case errors.Is(c, lockcore.ErrReleased) && err == nil:
			releases++
		default:
			t.Fatalf("try %d: Ended with %v, Release returned %v", i, c, err)
		}
	}
	t.Logf("300 tries: %d ended by the ceiling, %d by Release", ceilings, releases)
	if ceilings == 0 || releases == 0 {
		t.Errorf("the race was not run both ways: %d by the ceiling, %d by Release", ceilings, releases)
	}
}

// TestReentryShortensCeiling: an acquisition that re-enters a hold in
// memory with a MaxHold that ends sooner than the hold's own ceiling
// brings the hold's end forward; one that ends later changes nothing.
func TestReentryShortensCeiling(t *testing.T) {
	e := &testEngine{}
	ctx := context.Background()
	ls, err := e.Acquire(ctx, testKey(t), Policy{})
	if err != nil {
		t.Fatal(err)
	}
	limitHold(ls, time.Hour)
	later, err := e.Acquire(ls.Context(), testKey(t), Policy{MaxHold: 2 * time.Hour})
	if err != nil || !later.Reentered() {
		t.Fatalf("re-entry: %v", err)
	}
	start := time.Now()
	sooner, err := e.Acquire(ls.Context(), testKey(t), Policy{MaxHold: 50 * time.Millisecond})
	if err != nil || !sooner.Reentered() {
		t.Fatalf("re-entry: %v", err)
	}
	waitDone(t, "the hold at the inner ceiling", ls.Context())
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("ended %v after the inner acquisition, before its ceiling", d)
	}
	if c := context.Cause(ls.Context()); !errors.Is(c, lockcore.ErrMaxHold) || !strings.Contains(c.Error(), "50ms") {
		t.Fatalf("cause %v, want ErrMaxHold of the inner 50ms ceiling", c)
	}
	for _, l := range []*Lease{sooner, later, ls} {
		_ = l.Release(ctx)
	}
}

// loseLease loses the hold of ls, as Serve does when its Taken ends.
func loseLease(ls *Lease, cause error) bool { return ls.h.lose(nil, cause) }

// fenceOf returns the fencing token of the innermost lock ctx holds.
func fenceOf(ctx context.Context) (int64, bool) {
	if held := HeldFrom(ctx); len(held) > 0 {
		return held[0].Fence, true
	}
	return 0, false
}

// TestLostHoldNeitherJoinsNorLeaves: a hold its backend has lost (its
// Err says so) whose lease no watcher has ended yet is neither joined by
// an acquisition (Request.Join is TokensFrom) nor carried to another
// process: its token may own the key again in the backend, under another
// fence.
func TestLostHoldNeitherJoinsNorLeaves(t *testing.T) {
	e := &testEngine{}
	key := testKey(t)
	ctx := context.Background()
	ls, err := e.Acquire(ctx, key, Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if got := TokensFrom(ls.Context()); len(got) != 1 {
		t.Fatalf("a live hold's context carries %v, want its token", got)
	}
	e.last.lost.Store(true) // the backend lost it; nothing told the lease
	if got := TokensFrom(ls.Context()); len(got) != 0 {
		t.Errorf("the token of a hold its backend lost leaves the process: %v", got)
	}
	if err := ls.Err(); !errors.Is(err, errTestGone) {
		t.Errorf("the lease's Err: %v, want the backend's loss", err)
	}
}
