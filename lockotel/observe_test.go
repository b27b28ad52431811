package lockotel_test

import (
	"context"
	"errors"
	"testing"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// checked is an engine with a Check method.
type checked struct {
	*locktest.Engine
	err error
}

func (c *checked) Check(context.Context) error { return c.err }

// TestObserveReentry: a lease taken through an observed Locker re-enters
// through the Locker and through its engine alike, and the Locker asks
// for routes (its spans and metrics carry them).
func TestObserveReentry(t *testing.T) {
	r := newRig(t)
	fe := new(locktest.Engine)
	l := lock.FromEngine(fe, lock.Observe(r.tel))
	if !lifecycle.RecordsRoute(l) {
		t.Fatal("an observed Locker does not ask for routes")
	}
	if lifecycle.RecordsRoute(lock.FromEngine(plain{fe})) {
		t.Fatal("a Locker neither observed nor operable asks for routes")
	}
	k := mustKey(t, "productID", "1")
	ls, err := l.Acquire(bounded(t), k, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []lifecycle.Locker{l, lifecycle.Serve(fe, nil)} {
		in, err := e.Acquire(ls.Context(), k, lifecycle.Policy{Wait: lockcore.FailFast})
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
}

// TestObserve: lock.Observe leaves the Locker's Check and Operator to the
// engine of lock.FromEngine itself. (A route cannot be given it:
// lock.Option does not compile there.)
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

func (p plain) Take(ctx context.Context, r lockcore.Request) (lockcore.Hold, error) {
	return p.e.Take(ctx, r)
}

func (p plain) Promises() lockcore.Promises { return p.e.Promises() }

func (p plain) Close() error { return p.e.Close() }

// TestOperatorObserved: a Locker made with FromEngine and observed for
// telemetry offers its engine's operations (admin page, routelock
// command), observed by one telemetry or two; and none for an engine that
// cannot operate.
func TestOperatorObserved(t *testing.T) {
	op := operable{new(locktest.Engine)}
	for _, opts := range [][]lock.Option{nil, {lock.Observe(newRig(t).tel)}, {lock.Observe(newRig(t).tel), lock.Observe(newRig(t).tel)}} {
		if got := lock.FromEngine(op, opts...).Operator(); got != lockcore.Operator(op) {
			t.Errorf("FromEngine with %d observers: Operator() = %v, want the engine", len(opts), got)
		}
	}
	if got := lock.FromEngine(plain{new(locktest.Engine)}, lock.Observe(newRig(t).tel)).Operator(); got != nil {
		t.Errorf("an engine that cannot operate, observed: Operator() = %T, want nil", got)
	}
}
