package quorumengine_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/quorumengine"
)

// newMaster returns a client of a new embedded Redis: in production, each
// of the quorum's masters is a redis-server of its own, on a host of its
// own.
func newMaster() (*redis.Client, func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return c, func() { c.Close(); m.Close() }
}

// Example locks on a quorum of three independent masters: a hold is a
// hold on at least two of them, and another owner is kept out until it is
// released.
func Example() {
	rdbA, stopA := newMaster()
	defer stopA()
	rdbB, stopB := newMaster()
	defer stopB()
	rdbC, stopC := newMaster()
	defer stopC()

	e, err := quorumengine.New([]redis.UniversalClient{rdbA, rdbB, rdbC}, quorumengine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	locker := lock.FromEngine(e)
	defer locker.Close()

	ctx := context.Background()
	key, _ := lockcore.NewKey("productID", "42")
	held, err := locker.Acquire(ctx, key, lock.FailFast())
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.Acquire(context.Background(), key, lock.FailFast()) // another request
	fmt.Println("another owner:", errors.Is(err, lockcore.ErrNotAcquired))
	fmt.Println("fenced:", held.Fence() > 0)
	_ = held.Release(ctx)
	// Output:
	// another owner: true
	// fenced: true
}
