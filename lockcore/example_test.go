package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// maintenance is an Engine that takes its holds from another, and refuses
// fresh ones while an operator has switched it off: an Engine only takes
// holds and gives them back, so it composes as any other interface does.
type maintenance struct {
	lockcore.Engine
	off atomic.Bool
}

func (m *maintenance) Take(ctx context.Context, r lockcore.Request) (lockcore.Hold, error) {
	if m.off.Load() {
		return nil, fmt.Errorf("%w: %s: down for maintenance", lockcore.ErrUnavailable, r.Key)
	}
	return m.Engine.Take(ctx, r)
}

// An Engine only takes holds and gives them back; the Locker it is given
// to owns the leases: their contexts, re-entry in memory, owner tokens
// and MaxHold. So a nested acquisition by the same request re-enters
// without asking the engine.
func ExampleEngine() {
	m := &maintenance{Engine: new(locktest.Engine)}
	locker := lock.FromEngine(m)

	ctx := context.Background()
	key, _ := lockcore.NewKey("productID", "42")
	outer, err := locker.Acquire(ctx, key, lock.FailFast())
	if err != nil {
		panic(err)
	}
	m.off.Store(true)
	inner, err := locker.Acquire(outer.Context(), key, lock.FailFast())
	fmt.Println("nested, engine off:", err, inner.ReenteredInMemory(), inner.Fence() == outer.Fence())
	_, err = locker.Acquire(ctx, key, lock.FailFast())
	fmt.Println("another request:", errors.Is(err, lockcore.ErrUnavailable))
	_ = inner.Release(ctx)
	_ = outer.Release(ctx)
	// Output:
	// nested, engine off: <nil> true true
	// another request: true
}
