//go:build long

package redisengine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestUnavailable: with Redis gone, Acquire fails closed with ErrUnavailable
// and a held lease learns it is lost before its TTL could run out in Redis.
func TestUnavailable(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	redistest.Own(t, func(t *testing.T, addr string, stop func()) {
		l, err := New(clientFor(t, addr), Options{Prefix: redistest.Prefix(t), ReleaseTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		const ttl = 400 * time.Millisecond
		ls, err := l.Acquire(ctx, mustKey(t, "held"), lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		confirmed := time.Now() // the acquire was sent before this
		lost := make(chan time.Time, 1)
		go func() {
			<-ls.Context().Done()
			lost <- time.Now()
		}()
		stop()
		cut := time.Now()

		for _, p := range []lifecycle.Policy{{}, {Wait: time.Second}} {
			_, err = l.Acquire(ctx, mustKey(t, "other"), p)
			if !errors.Is(err, lockcore.ErrUnavailable) {
				t.Fatalf("acquire (%+v) with Redis down: %v, want ErrUnavailable", p, err)
			}
		}
		var learned time.Time
		select {
		case learned = <-lost:
		case <-time.After(ttl + time.Second):
			t.Fatal("holder cut off from Redis never learned its lease was lost")
		}
		if !errors.Is(ls.Err(), lockcore.ErrLockLost) {
			t.Fatalf("lease error %v, want ErrLockLost", ls.Err())
		}
		// Redis would have expired the key no earlier than confirmed+ttl.
		if !learned.Before(confirmed.Add(ttl)) {
			t.Fatalf("loss learned %v after the last confirmation, not before the TTL %v", learned.Sub(confirmed), ttl)
		}
		t.Logf("loss learned %v after the cut, %v before the TTL could end", learned.Sub(cut), confirmed.Add(ttl).Sub(learned))
		if err := ls.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
			t.Fatalf("release: %v", err)
		}
	})
}

// clientFor returns a client of addr at go-redis's defaults, as users run
// it, closed when the test ends.
func clientFor(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
