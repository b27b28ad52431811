package redisengine

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestQueuedCallFailsWithItsFlight: when Redis stops answering, a call
// queued behind the calls on the wire fails when they do, with their error,
// instead of waiting for them and then for itself.
func TestQueuedCallFailsWithItsFlight(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		proxy := faultproxy.Start(t, b.Addr)
		const timeout = 300 * time.Millisecond
		c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, DialTimeout: timeout,
			ReadTimeout: timeout, WriteTimeout: timeout})
		defer c.Close()
		l, err := New(c, Options{Prefix: redistest.Prefix(t), ReleaseTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		// Warm the pool so that the calls below need no dial.
		for i := range maxFlights {
			ls, err := l.Acquire(ctx, mustKey(t, "warm", strconv.Itoa(i)), lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			_ = ls.Release(ctx)
		}

		proxy.Blackhole(true)
		type ended struct {
			err error
			at  time.Time
		}
		wire := make(chan ended, maxFlights)
		for i := range maxFlights {
			go func() {
				_, err := l.Acquire(ctx, mustKey(t, "on-wire", strconv.Itoa(i)), lifecycle.Policy{Wait: lockcore.FailFast})
				wire <- ended{err, time.Now()}
			}()
		}
		eventually(t, 5*time.Second, "flights full", func() bool {
			l.batch.mu.Lock()
			defer l.batch.mu.Unlock()
			return l.batch.flights == maxFlights
		})
		_, err = l.Acquire(ctx, mustKey(t, "queued"), lifecycle.Policy{Wait: lockcore.FailFast})
		queuedEnd := time.Now()
		if !errors.Is(err, lockcore.ErrUnavailable) {
			t.Fatalf("queued call: %v, want ErrUnavailable", err)
		}
		var last time.Time // when the last call on the wire failed
		for range maxFlights {
			e := <-wire
			if !errors.Is(e.err, lockcore.ErrUnavailable) {
				t.Fatalf("call on the wire: %v, want ErrUnavailable", e.err)
			}
			if e.at.After(last) {
				last = e.at
			}
		}
		// It fails with the flights, not a read timeout of its own after
		// them (measured from their own failures, so that a flight
		// scheduled late on a busy machine does not count).
		if d := queuedEnd.Sub(last); d >= timeout/2 {
			t.Fatalf("queued call failed %v after the last call on the wire, with a read timeout of %v", d, timeout)
		}
		proxy.Blackhole(false)
	})
}
