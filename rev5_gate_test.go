package lock_test

import (
	"context"
	"errors"
	"testing"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// forwarding is an engine of a user's own that wraps another and forwards
// only the Engine's methods (Take, Promises, Close), as a metrics or
// logging wrapper does: it does not declare the gates it does not offer.
type forwarding struct{ lockcore.Engine }

// TestGateRefusesThroughWrappingEngine: a resource whose gate is closed is
// refused "by every engine on the same backend" (lockcore.Gatekeeper). An
// engine that wraps the gated engine and forwards Take takes from the same
// backend, so its Take must still refuse the closed resource.
func TestGateRefusesThroughWrappingEngine(t *testing.T) {
	ctx := context.Background()
	b := new(locktest.Engine)
	defer b.Close()
	k, err := lockcore.NewKey("product", "42")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CloseGate(ctx, k, 0); err != nil {
		t.Fatal(err)
	}
	l := lock.FromEngine(forwarding{b})
	ls, err := l.Acquire(ctx, k, lock.FailFast())
	if err == nil {
		_ = ls.Release(ctx)
	}
	if !errors.Is(err, lockcore.ErrGateClosed) {
		t.Fatalf("Acquire of a sold-out resource through a wrapping engine: %v, want ErrGateClosed", err)
	}
}
