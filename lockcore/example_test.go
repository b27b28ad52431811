package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/lockcore/redisengine"
)

// counting wraps another engine, as a telemetry wrapper would: it counts
// acquisitions by outcome. Wrappers are plain types; give one to
// lock.FromEngine, middleware.Lock or the interceptors.
type counting struct {
	lockcore.Engine
	acquired, busy atomic.Int64
}

func (c *counting) Acquire(ctx context.Context, key lockcore.Key, p lockcore.Policy) (*lockcore.Lease, error) {
	ls, err := c.Engine.Acquire(ctx, key, p)
	switch {
	case err == nil:
		c.acquired.Add(1)
	case errors.Is(err, lockcore.ErrNotAcquired):
		c.busy.Add(1)
	}
	return ls, err
}

// An engine that wraps the Redis engine: a nested acquisition re-enters in
// memory, another owner is refused.
func ExampleEngine() {
	mr, err := miniredis.Run() // any Redis; embedded here
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	redisEngine, err := redisengine.New(rdb, redisengine.Options{})
	if err != nil {
		panic(err)
	}
	defer redisEngine.Close()
	var e lockcore.Engine = &counting{Engine: redisEngine}

	ctx := context.Background()
	key, _ := lockcore.NewKey("productID", "42")
	outer, err := e.Acquire(ctx, key, lockcore.Policy{Wait: lockcore.FailFast})
	if err != nil {
		panic(err)
	}
	inner, err := e.Acquire(outer.Context(), key, lockcore.Policy{Wait: lockcore.FailFast}) // re-enters
	fmt.Println("nested:", err, inner.Fence() == outer.Fence())
	_, err = e.Acquire(ctx, key, lockcore.Policy{Wait: lockcore.FailFast}) // another owner, failing fast
	fmt.Println("another owner:", errors.Is(err, lockcore.ErrNotAcquired))
	_ = inner.Release(ctx)
	_ = outer.Release(ctx)
	c := e.(*counting)
	fmt.Println("acquired", c.acquired.Load(), "busy", c.busy.Load())
	// Output:
	// nested: <nil> true
	// another owner: true
	// acquired 2 busy 1
}

// maintenance is a Backend that takes its holds from another, and refuses
// fresh ones while an operator has switched it off: a Backend only takes
// holds and gives them back, so it composes as any other interface does.
type maintenance struct {
	lockcore.Backend
	off atomic.Bool
}

func (m *maintenance) Take(ctx context.Context, r lockcore.Request) (lockcore.Taken, error) {
	if m.off.Load() {
		return nil, fmt.Errorf("%w: %s: down for maintenance", lockcore.ErrUnavailable, r.Key)
	}
	return m.Backend.Take(ctx, r)
}

// Serve makes an Engine of a Backend: the leases, their contexts,
// re-entry in memory, owner tokens and MaxHold are Serve's, so a nested
// acquisition by the same request re-enters without asking the backend.
func ExampleServe() {
	m := &maintenance{Backend: new(locktest.Engine)}
	e := lockcore.Serve(m, nil)

	ctx := context.Background()
	key, _ := lockcore.NewKey("productID", "42")
	outer, err := e.Acquire(ctx, key, lockcore.Policy{Wait: lockcore.FailFast})
	if err != nil {
		panic(err)
	}
	m.off.Store(true)
	inner, err := e.Acquire(outer.Context(), key, lockcore.Policy{Wait: lockcore.FailFast})
	fmt.Println("nested, backend off:", err, inner.ReenteredInMemory(), inner.Fence() == outer.Fence())
	_, err = e.Acquire(ctx, key, lockcore.Policy{Wait: lockcore.FailFast})
	fmt.Println("another request:", errors.Is(err, lockcore.ErrUnavailable))
	_ = inner.Release(ctx)
	_ = outer.Release(ctx)
	// Output:
	// nested, backend off: <nil> true true
	// another request: true
}
