package locktest

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// checkGates: a closed gate (lockcore.Gatekeeper) refuses every fresh
// acquisition of its key, on every engine of the backend, within a moment
// of its closing: at once, failing fast or willing to wait, with
// ErrGateClosed and not ErrNotAcquired. lifecycle.CloseGate closes the gate
// of the context's lock, and refuses (closing nothing) when that lock is
// released or was taken with others; the request holding it still re-enters in memory;
// other keys are untouched; Gates lists it on every engine; permits are
// refused, readers and restocks (Policy.Restock) are not, and
// lifecycle.OpenGate from a restock's context opens it; a gate closed
// for a time opens by itself then, not before; OpenGate opens it.
func checkGates(r *rig) {
	a, other := r.key("a"), r.key("b")
	ga, gb := r.ea.(lockcore.Gatekeeper), r.eb.(lockcore.Gatekeeper)

	// Not an outer lock's gate, when the inner one is gone; not one of
	// several taken together.
	outer := r.acquire(r.a, r.ctx, other, failFast)
	inner := r.acquire(r.a, outer.Context(), a, failFast)
	r.release(inner)
	if err := lifecycle.CloseGate(inner.Context(), 0); !errors.Is(err, lockcore.ErrLockLost) {
		r.t.Fatalf("CloseGate from a released lock's context, inside another's: %v, want ErrLockLost", err)
	}
	r.release(outer)
	both, err := lifecycle.AcquireAll(r.ctx, r.a, []lockcore.Key{a, other}, failFast)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := lifecycle.CloseGate(both[1].Context(), 0); !errors.Is(err, lockcore.ErrMisconfigured) {
		r.t.Fatalf("CloseGate from a context holding two resources taken together: %v, want ErrMisconfigured", err)
	}
	if err := lifecycle.ReleaseAll(context.Background(), both); err != nil {
		r.t.Fatal(err)
	}
	for _, k := range []lockcore.Key{a, other} {
		if _, err := ga.GateOf(r.ctx, k); err != nil {
			r.t.Fatalf("a refused CloseGate closed the gate of %v: %v", k, err)
		}
	}

	ls := r.acquire(r.a, r.ctx, a, failFast)
	if err := lifecycle.CloseGate(ls.Context(), 0); err != nil {
		r.t.Fatalf("CloseGate from the holder's context: %v", err)
	}
	in, err := r.a.Acquire(ls.Context(), a, failFast)
	if err != nil {
		r.t.Fatalf("the holder's request re-entering its lock after closing its gate: %v", err)
	}
	r.release(in)
	r.release(ls)
	refused := func(e lifecycle.Locker, p lifecycle.Policy) bool {
		start := time.Now()
		ls, err := e.Acquire(r.ctx, a, p)
		if err == nil {
			r.release(ls)
			return false
		}
		if !errors.Is(err, lockcore.ErrGateClosed) || errors.Is(err, lockcore.ErrNotAcquired) {
			r.t.Fatalf("acquisition of a key whose gate is closing: %v, want ErrGateClosed alone", err)
		}
		if took := time.Since(start); took > awaitBound/2 {
			r.t.Fatalf("a closed gate refused an acquisition after %v, want at once", took)
		}
		return true
	}
	for _, e := range r.engines() {
		if !r.eventually(func() bool { return refused(e, lifecycle.Policy{Wait: checkBound}) }) {
			r.t.Fatalf("a gate closed on one engine never refused a waiting acquisition on %T", e)
		}
		if !refused(e, failFast) {
			r.t.Fatal("a closed gate let a fail-fast acquisition through")
		}
	}
	r.release(r.acquire(r.b, r.ctx, other, failFast))
	for _, g := range []lockcore.Gatekeeper{ga, gb} {
		gates, err := g.Gates(r.ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		if len(gates) != 1 || gates[0].Key != a || !gates[0].Until.IsZero() || gates[0].Since.IsZero() {
			r.t.Fatalf("Gates: %+v, want the one gate of %v, closed until opened", gates, a)
		}
		if g, err := g.GateOf(r.ctx, a); !errors.Is(err, lockcore.ErrGateClosed) || g.Key != a || !strings.Contains(err.Error(), a.String()) {
			r.t.Fatalf("GateOf(%v): %+v %v, want closed, with an error naming it", a, g, err)
		}
	}

	// Permits take from the resource: refused. Readers only look, and a
	// restock gets through, on either engine; the restock's request
	// reopens the gate (lifecycle.OpenGate) for every engine.
	if !refused(r.a, lifecycle.Policy{Wait: lockcore.FailFast, Share: 4}) {
		r.t.Fatal("a closed gate let a permit through")
	}
	for _, e := range r.engines() {
		rd := r.acquire(e, r.ctx, a, lifecycle.Policy{Wait: lockcore.FailFast, Share: lifecycle.ShareAll})
		r.release(rd)
	}
	restock := r.acquire(r.b, r.ctx, a, lifecycle.Policy{Wait: lockcore.FailFast, Restock: true})
	if err := lifecycle.OpenGate(restock.Context()); err != nil {
		r.t.Fatalf("OpenGate from a restock's context: %v", err)
	}
	r.release(restock)
	if !r.eventually(func() bool { return !refused(r.a, failFast) }) {
		r.t.Fatal("an opened gate still refuses on the other engine")
	}

	// For a time: closed until then, and open after. (Long enough that a
	// loaded machine still sees it closed on the other engine.)
	const d = 2 * time.Second
	closed := time.Now()
	if err := gb.CloseGate(r.ctx, a, d); err != nil {
		r.t.Fatal(err)
	}
	if !refused(r.b, failFast) {
		r.t.Fatal("a gate closed for a time does not refuse on the engine that closed it")
	}
	if !r.eventually(func() bool { return refused(r.a, failFast) || time.Since(closed) >= d }) || time.Since(closed) >= d {
		r.t.Fatalf("a gate closed for %v never refused on the other engine", d)
	}
	if !r.eventually(func() bool { return !refused(r.a, failFast) }) {
		r.t.Fatal("a gate closed for a time never opened")
	}
	if took := time.Since(closed); took < d {
		r.t.Fatalf("a gate closed for %v opened after %v", d, took)
	}
	if gates, err := ga.Gates(r.ctx); err != nil || len(gates) != 0 {
		r.t.Fatalf("Gates after every gate opened: %+v, %v", gates, err)
	}
}
