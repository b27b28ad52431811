package lock_test

import (
	"context"
	"errors"
	"testing"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/lockcore/redisengine"
)

// forwarding is an engine of a user's own that wraps another and forwards
// only the Engine's methods (Take, Promises, Close), as a metrics or
// logging wrapper does: it does not declare the gates it does not offer.
type forwarding struct{ lockcore.Engine }

// TestGateRefusesThroughWrappingEngine: a resource whose gate is closed is
// refused "by every engine on the same backend" (lockcore.Gatekeeper),
// also through an engine that wraps the gated one and forwards Take only,
// whose gates the Locker does not know: the wrapped engine's Take refuses
// it (Request.GateChecked is false), on the in-memory engine and on a
// fresh Redis engine's very first request, after another closed the gate.
// A reader passes.
func TestGateRefusesThroughWrappingEngine(t *testing.T) {
	ctx := context.Background()
	k, err := lockcore.NewKey("product", "42")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) lockcore.Engine // closes k's gate, returns the engine to wrap
	}{
		{"memory", func(t *testing.T) lockcore.Engine {
			b := new(locktest.Engine)
			t.Cleanup(func() { _ = b.Close() })
			if err := b.CloseGate(ctx, k, 0); err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"redis", func(t *testing.T) lockcore.Engine {
			rdb, prefix := redistest.Best(t).Universal(t), redistest.Prefix(t)
			closer, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = closer.Close() })
			if err := closer.CloseGate(ctx, k, 0); err != nil {
				t.Fatal(err)
			}
			e, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			return e
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lock.FromEngine(forwarding{tc.setup(t)})
			ls, err := l.Acquire(ctx, k, lock.FailFast())
			if err == nil {
				_ = ls.Release(ctx)
			}
			if !errors.Is(err, lockcore.ErrGateClosed) {
				t.Fatalf("Acquire of a sold-out resource through a wrapping engine: %v, want ErrGateClosed", err)
			}
			rd, err := l.Acquire(ctx, k, lock.Policy{Share: lifecycle.ShareAll, Wait: lockcore.FailFast})
			if err != nil {
				t.Fatalf("a reader through the wrapping engine: %v, want it to pass the gate", err)
			}
			_ = rd.Release(ctx)
		})
	}
}
