package redisengine_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// Example takes a lock, re-enters it from a nested call made with the lease's
// context, and shows that another owner is kept out until the release.
func Example() {
	mr, err := miniredis.Run() // any Redis; embedded here
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	engine, err := redisengine.New(rdb, redisengine.Options{})
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	locker := lock.FromEngine(engine) // owns the leases of the engine's holds

	ctx := context.Background()
	key, err := lockcore.NewKey("productID", "42")
	if err != nil {
		panic(err)
	}
	lease, err := locker.Acquire(ctx, key, lock.Wait(2*time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println("locked", lease.Key())

	// A nested call on behalf of the same request re-enters.
	nested, err := locker.Acquire(lease.Context(), key, lock.FailFast())
	fmt.Println("nested call re-entered:", err == nil, nested.Fence() == lease.Fence())
	_ = nested.Release(ctx)

	// Another request (another owner token) is refused while it is held.
	_, err = locker.Acquire(ctx, key, lock.FailFast())
	fmt.Println("other owner refused:", errors.Is(err, lockcore.ErrNotAcquired))

	if err := lease.Release(ctx); err != nil {
		panic(err)
	}
	info, _ := engine.Inspect(ctx, key)
	fmt.Println("held after release:", (len(info.Holders) > 0))
	// Output:
	// locked productID:42
	// nested call re-entered: true true
	// other owner refused: true
	// held after release: false
}

// ExampleNewKey shows the escaping that keeps distinct part lists apart.
func ExampleNewKey() {
	a, _ := lockcore.NewKey("a:b", "c")
	b, _ := lockcore.NewKey("a", "b:c")
	fmt.Println(a, b)
	_, err := lockcore.NewKey("productID", "")
	fmt.Println(errors.Is(err, lockcore.ErrInvalidKey))
	// Output:
	// a%3Ab:c a:b%3Ac
	// true
}
