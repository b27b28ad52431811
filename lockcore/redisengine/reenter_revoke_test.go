package redisengine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestRevokedReenteredLeaseRelease: a hold re-entered in memory (a nested
// Acquire through the outer lease's context) and then force-released:
// both leases' contexts end with ErrRevoked, and each lease's Release
// reports the loss (ErrLockLost, here ErrRevoked), whichever is released
// first, as Lease.Release promises ("ErrLockLost if the lease was lost
// before"); neither reports success.
func TestRevokedReenteredLeaseRelease(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		l := newLocker(t, b, prefix, Options{TTL: 600 * time.Millisecond})
		op := newLocker(t, b, prefix, Options{})
		ctx := context.Background()
		key := mustKey(t, "nested", "1")
		outer, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		inner, err := l.Acquire(outer.Context(), key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		if !inner.Reentered() {
			t.Fatal("the nested Acquire did not re-enter in memory")
		}
		if _, err := op.Revoke(ctx, key, "nested"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-inner.Context().Done():
		case <-time.After(time.Second):
			t.Fatal("the re-entered lease's context was not cancelled")
		}
		if cause := context.Cause(inner.Context()); !errors.Is(cause, lockcore.ErrRevoked) {
			t.Fatalf("cause %v, want ErrRevoked", cause)
		}
		if err := inner.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
			t.Errorf("Release of the revoked re-entered lease: %v, want ErrLockLost (ErrRevoked)", err)
		}
		if err := outer.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
			t.Errorf("Release of the revoked outer lease: %v, want ErrLockLost (ErrRevoked)", err)
		}
	})
}
