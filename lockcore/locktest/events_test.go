package locktest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// recorder is a lockcore.Events that writes down every call, in order.
type recorder struct {
	mu    sync.Mutex
	calls []string
	ctxs  []context.Context // of the Ended calls
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *recorder) Waiting(key lockcore.Key, delta int) {
	r.add(fmt.Sprintf("waiting %v %+d", key, delta))
}
func (r *recorder) Woken(key lockcore.Key, by string) {
	r.add(fmt.Sprintf("woken %v %v", key, by))
}
func (r *recorder) Renewed(key lockcore.Key, err error) {
	r.add(fmt.Sprintf("renewed %v %v", key, err))
}
func (r *recorder) Ended(ctx context.Context, key lockcore.Key, held, release time.Duration, cause, err error) {
	what := "lost"
	switch {
	case errors.Is(cause, lockcore.ErrReleased):
		what = "released"
	case errors.Is(cause, lockcore.ErrRevoked):
		what = "revoked"
	case !errors.Is(cause, lockcore.ErrLockLost):
		what = fmt.Sprintf("cause %v", cause)
	}
	if what != "released" && ctx.Err() != nil {
		what += " after its context ended" // too late to record on the request's span
	}
	if held < 0 || release < 0 || what != "released" && release != 0 {
		what += fmt.Sprintf(" (held %v, release %v)", held, release)
	}
	r.mu.Lock()
	r.ctxs = append(r.ctxs, ctx)
	r.mu.Unlock()
	r.add(fmt.Sprintf("ended %v %s err=%v", key, what, err))
}

// take returns the calls so far and forgets them.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func wantCalls(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	if got := r.take(); !slices.Equal(got, want) {
		t.Fatalf("events:\n  got  %q\n  want %q", got, want)
	}
}

// lost waits, a bounded time, until the contexts of leases are cancelled.
func lost(t *testing.T, leases ...*lifecycle.Lease) {
	t.Helper()
	for _, ls := range leases {
		select {
		case <-ls.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("the context of the lease of %v was not cancelled", ls.Key())
		}
	}
}

// wantUnordered is wantCalls for calls made by goroutines of their own.
func wantUnordered(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	got := r.take()
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("events, in any order:\n  got  %q\n  want %q", got, want)
	}
}

// TestEvents: the engine tells its Events what it does, once each: a
// release, a wait granted by a release (woken by message), a wait that ran
// out (woken by its timer), a wait given up by its context, a token
// re-entry (a hold of its own) and a loss of both entries to Lose and to
// Revoke, with the lease's context while it is still live;
// in-memory re-entries and releases of lost entries report nothing.
func TestEvents(t *testing.T) {
	var r recorder
	e := &locktest.Engine{Events: &r}
	k := key(t, "ev", "1")
	ctx := bounded(t)

	ls := acquire(t, e, ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
	inner := acquire(t, e, ls.Context(), k, lifecycle.Policy{Wait: lockcore.FailFast})
	release(t, inner)
	wantCalls(t, &r)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, &r, "ended ev:1 released err=<nil>")
	if r.ctxs[0] != ctx {
		t.Fatal("Ended of a release did not get the release's context")
	}

	// Granted by a release.
	ls = acquire(t, e, ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
	got := make(chan *lifecycle.Lease, 1)
	go func() {
		next, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: time.Hour})
		if err != nil {
			t.Error(err)
		}
		got <- next
	}()
	waitersAre(t, e, k, 1)
	wantCalls(t, &r, "waiting ev:1 +1")
	release(t, ls)
	next := <-got
	if next == nil {
		t.FailNow()
	}
	// The releaser reports its end while the waiter wakes.
	wantUnordered(t, &r, "ended ev:1 released err=<nil>", "woken ev:1 message", "waiting ev:1 -1")

	// A wait that runs out, and one given up by its context.
	if _, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: 30 * time.Millisecond}); !errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Fatalf("wait: %v", err)
	}
	wantCalls(t, &r, "waiting ev:1 +1", "woken ev:1 timer", "waiting ev:1 -1")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.Acquire(cctx, k, lifecycle.Policy{Wait: time.Hour})
		done <- err
	}()
	waitersAre(t, e, k, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	wantCalls(t, &r, "waiting ev:1 +1", "waiting ev:1 -1")

	// A token re-entry is a hold of its own: both entries end with the loss.
	byToken := acquire(t, e, enginetest.WithToken(ctx, next.Token()), k, lifecycle.Policy{Wait: lockcore.FailFast})
	if !e.Lose(k) {
		t.Fatal("Lose found no hold")
	}
	lost(t, next, byToken) // Ended is told before the context is cancelled
	wantUnordered(t, &r, "ended ev:1 lost err=<nil>", "ended ev:1 lost err=<nil>")
	if n := len(r.ctxs); !(r.ctxs[n-2] == next.Context() && r.ctxs[n-1] == byToken.Context() ||
		r.ctxs[n-1] == next.Context() && r.ctxs[n-2] == byToken.Context()) {
		t.Fatal("Ended of a loss did not get the lease's context")
	}
	if err := next.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("release of a lost lease: %v", err)
	}
	if err := byToken.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("release of a lost token entry: %v", err)
	}
	wantCalls(t, &r)

	ls = acquire(t, e, ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
	if _, err := e.Revoke(bounded(t), k, "by a test"); err != nil {
		t.Fatal(err)
	}
	lost(t, ls)
	if cause := context.Cause(ls.Context()); !errors.Is(cause, lockcore.ErrRevoked) {
		t.Fatalf("cause %v, want ErrRevoked", cause)
	}
	wantCalls(t, &r, "ended ev:1 revoked err=<nil>")
	if err := ls.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("release of a revoked lease: %v", err)
	}
	wantCalls(t, &r)
	wantFree(t, e, k)
}
