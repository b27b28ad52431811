//go:build long

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

// TestRetryAfterTracksHolds: with holders that keep a lock 300 ms, a caller
// refused at the start of a hold is told to retry within 2× of how long it
// really has to wait, not after the 10 s lease the watchdog keeps renewing
// (what it was told before).
func TestRetryAfterTracksHolds(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		l := lockerOn(t, b.Universal(t), redistest.Prefix(t), Options{})
		ctx := context.Background()
		key := mustKey(t, "productID", "42")
		const work = 300 * time.Millisecond
		hold := func() *lifecycle.Lease {
			ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return ls
		}
		for i := 0; i < 4; i++ { // the history the estimate comes from
			ls := hold()
			time.Sleep(work) // the holder's work
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 3; i++ {
			ls := hold()
			released := make(chan struct{})
			go func() {
				defer close(released)
				time.Sleep(work) // the holder's work
				_ = ls.Release(ctx)
			}()
			_, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			var ce *lockcore.ContentionError
			if !errors.As(err, &ce) {
				t.Fatalf("fail-fast acquire of a held key: %v", err)
			}
			refused := time.Now()
			next := hold() // waits for the lock: the real wait
			real := time.Since(refused)
			<-released
			if err := next.Release(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("advertised %v, real wait %v", ce.RetryAfter, real)
			if ce.RetryAfter > 2*real || ce.RetryAfter < real/2 {
				t.Errorf("advertised %v for a real wait of %v: not within 2×", ce.RetryAfter, real)
			}
		}
	})
}
