package locktest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// An in-memory engine in a test: a second acquisition queues behind the
// first, the test waits for that with Await (no sleeps), and a revocation
// plays a lock lost while its holder works.
func Example() {
	e := new(locktest.Engine)
	locker := lock.FromEngine(e)
	ctx := context.Background()
	key, _ := lockcore.NewKey("productID", "42")

	first, _ := locker.Acquire(ctx, key, lock.FailFast())
	got := make(chan *lock.Lease)
	go func() {
		second, _ := locker.Acquire(ctx, key, lock.Wait(time.Minute))
		got <- second
	}()
	_ = e.Await(ctx, func() bool {
		info, _ := e.Inspect(ctx, key)
		return len(info.Waiters) == 1
	})
	fmt.Println("queued behind fence", first.Fence())

	_, _ = e.Revoke(ctx, key, "playing a lost lock")
	<-first.Context().Done()
	fmt.Println("first lost:", errors.Is(context.Cause(first.Context()), lockcore.ErrLockLost))
	second := <-got
	fmt.Println("second holds fence", second.Fence())
	_ = second.Release(ctx)
	// Output:
	// queued behind fence 1
	// first lost: true
	// second holds fence 3
}
