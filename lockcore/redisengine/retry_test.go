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

// TestRetryAfterWithoutHistory: a caller refused by an engine that has seen
// no hold of the resource end (a fresh process, here another Engine on the
// same Redis than the holder's) is told to retry after firstRetry (100 ms),
// not after the holder's 10 s lease; a wait that ran out, likewise.
func TestRetryAfterWithoutHistory(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		holder := newLocker(t, b, prefix, Options{})
		fresh := newLocker(t, b, prefix, Options{})
		ctx := context.Background()
		key := mustKey(t, "productID", "42")
		ls, err := holder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer ls.Release(ctx)
		for _, p := range []lifecycle.Policy{{Wait: lockcore.FailFast}, {Wait: 50 * time.Millisecond}} {
			_, err = fresh.Acquire(ctx, key, p)
			var ce *lockcore.ContentionError
			if !errors.As(err, &ce) {
				t.Fatalf("acquire of a held key with %+v: %v", p, err)
			}
			if ce.RetryAfter != 100*time.Millisecond {
				t.Fatalf("RetryAfter %v with %+v and no history, want 100ms", ce.RetryAfter, p)
			}
		}
	})
}
