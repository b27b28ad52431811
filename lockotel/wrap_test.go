package lockotel_test

import (
	"context"
	"errors"
	"testing"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// wrapper is what the engine Wrap returns offers beside Acquire.
type wrapper interface {
	lockcore.Engine
	RecordsRoute() bool
	Unwrap() lockcore.Engine
	Check(context.Context) error
}

// checked is an engine with a Check method.
type checked struct {
	*locktest.Engine
	err error
}

func (c *checked) Check(context.Context) error { return c.err }

// TestWrap: Wrap makes a comparable engine that asks for routes, passes
// Check on when the wrapped engine has it, unwraps, and is not wrapped
// twice by one telemetry; a lease taken through it re-enters through it
// and through the wrapped engine alike.
func TestWrap(t *testing.T) {
	r := newRig(t)
	fe := new(locktest.Engine)
	w := r.tel.Wrap(fe)
	ow, ok := w.(wrapper)
	if !ok {
		t.Fatalf("Wrap returned a %T", w)
	}
	if !ow.RecordsRoute() || ow.Unwrap() != fe {
		t.Fatal("RecordsRoute or Unwrap")
	}
	if r.tel.Wrap(w) != w {
		t.Fatal("one telemetry wrapped its own engine again")
	}
	if other := newRig(t).tel.Wrap(w); other == w || other.(wrapper).Unwrap() != w {
		t.Fatal("another telemetry did not wrap the engine")
	}
	_ = map[lockcore.Engine]bool{w: true} // comparable
	if err := ow.Check(bounded(t)); err != nil {
		t.Fatalf("Check of an engine without one: %v", err)
	}
	want := errors.New("not set up")
	if err := r.tel.Wrap(&checked{Engine: fe, err: want}).(wrapper).Check(bounded(t)); err != want {
		t.Fatalf("Check = %v, want the wrapped engine's", err)
	}

	k := mustKey(t, "productID", "1")
	ls, err := w.Acquire(bounded(t), k, lockcore.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []lockcore.Engine{w, fe} {
		in, err := e.Acquire(ls.Context(), k, lockcore.Policy{Wait: lockcore.FailFast})
		if err != nil || !in.Reentered() || in.Fence() != ls.Fence() {
			t.Fatalf("re-entry through %T: %v", e, err)
		}
		if err := in.Release(bounded(t)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ls.Release(bounded(t)); err != nil {
		t.Fatal(err)
	}

	defer func() {
		if recover() == nil {
			t.Fatal("Wrap(nil) did not panic")
		}
	}()
	r.tel.Wrap(nil)
}

// TestObserve: lock.Observe wraps the engine of lock.FromEngine, leaving
// the Locker's Check and Operator to the engine itself. (A route cannot
// be given it: lock.Option does not compile there.)
func TestObserve(t *testing.T) {
	r := newRig(t)
	want := errors.New("not set up")
	base := &checked{Engine: new(locktest.Engine), err: want}
	l := lock.FromEngine(base, lock.Observe(r.tel))
	if err := l.Check(bounded(t)); err != want {
		t.Fatalf("Check = %v", err)
	}
}

// operable is an engine that is also an Operator; its operations are not
// called here.
type operable struct{ *locktest.Engine }

func (operable) List(context.Context, string, int) ([]lockcore.Info, bool, error) {
	return nil, false, nil
}
func (operable) Inspect(context.Context, lockcore.Key) (lockcore.Info, error) {
	return lockcore.Info{}, nil
}
func (operable) Revoke(context.Context, lockcore.Key, string) (lockcore.Revocation, error) {
	return lockcore.Revocation{}, nil
}

// plain is an engine that is no Operator.
type plain struct{ e *locktest.Engine }

func (p plain) Acquire(ctx context.Context, key lockcore.Key, pol lockcore.Policy) (*lockcore.Lease, error) {
	return p.e.Acquire(ctx, key, pol)
}

func (p plain) Promises() lockcore.Promises { return p.e.Promises() }

// TestOperatorThroughWrapper: a Locker made with FromEngine on an engine
// wrapped for telemetry still offers the wrapped engine's operations
// (admin page, routelock command), through one wrapper or two.
func TestOperatorThroughWrapper(t *testing.T) {
	op := operable{new(locktest.Engine)}
	once := newRig(t).tel.Wrap(op)
	twice := newRig(t).tel.Wrap(once)
	for _, e := range []lockcore.Engine{op, once, twice} {
		if got := lock.FromEngine(e).Operator(); got != lockcore.Operator(op) {
			t.Errorf("FromEngine(%T).Operator() = %v, want the wrapped engine", e, got)
		}
	}
	if got := lock.FromEngine(newRig(t).tel.Wrap(plain{new(locktest.Engine)})).Operator(); got != nil {
		t.Errorf("an engine that cannot operate, wrapped: Operator() = %T, want nil", got)
	}
}
