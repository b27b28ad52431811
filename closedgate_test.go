package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestClosedLockerRefusesAsClosed: a Locker that was closed refuses
// every acquisition with ErrClosed (503: retry elsewhere), as its engine's
// Take does, and not from what it last knew of the gates: a closed engine
// no longer hears the gates, so a product restocked since is not Gone.
func TestClosedLockerRefusesAsClosed(t *testing.T) {
	ctx := context.Background()
	b := redistest.Best(t)
	rdb := b.Universal(t)
	prefix := redistest.Prefix(t)
	l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix})
	other, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	k := key(t, "productID", "42")
	ls, err := l.Acquire(ctx, k, lock.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(ctx)
	if err := other.CloseGate(ctx, k, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the gate closed on the Locker", func() bool {
		_, err := l.Acquire(ctx, k, lock.FailFast())
		return errors.Is(err, lockcore.ErrGateClosed)
	})
	l.Close()
	if err := other.OpenGate(ctx, k); err != nil { // restocked
		t.Fatal(err)
	}
	_, err = l.Acquire(ctx, k, lock.FailFast())
	if !errors.Is(err, lockcore.ErrClosed) {
		t.Fatalf("Acquire on a closed Locker, of a product restocked since: %v, want ErrClosed", err)
	}
}

// TestClosedMemoryEngineRefusesAsClosed: "from then on every acquisition
// fails with lockcore.ErrClosed" (locktest.Engine.Close), a sold-out
// resource's too.
func TestClosedMemoryEngineRefusesAsClosed(t *testing.T) {
	ctx := context.Background()
	b := new(locktest.Engine)
	l := lock.FromEngine(b)
	k := key(t, "productID", "42")
	if err := b.CloseGate(ctx, k, 0); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := l.Acquire(ctx, k, lock.FailFast()); !errors.Is(err, lockcore.ErrClosed) {
		t.Fatalf("Acquire on a closed engine: %v, want ErrClosed", err)
	}
}
