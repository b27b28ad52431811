//go:build long

package redisengine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

func testReleaseLatch(t *testing.T, k clientKind) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 10 * time.Second
		const every = time.Second // min(ttl/10, 1s)
		var hooked atomic.Int32
		var hookErr atomic.Value
		opt := Options{TTL: ttl, ReleaseTimeout: 200 * time.Millisecond,
			OnReleaseError: func(_ lockcore.Key, err error) { hooked.Add(1); hookErr.Store(err) }}
		prefix := redistest.Prefix(t)
		l, p := cutOffLocker(t, b, k, prefix, opt)
		observer := newLocker(t, b, prefix, Options{})
		warmScripts(t, l)
		ctx := context.Background()
		key := mustKey(t, "latch", "1")
		ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		p.Blackhole(true)
		if err := ls.Release(ctx); !errors.Is(err, lockcore.ErrUnavailable) {
			t.Fatalf("release into a partition: %v, want ErrUnavailable", err)
		}
		if hooked.Load() != 1 || !errors.Is(hookErr.Load().(error), lockcore.ErrUnavailable) {
			t.Fatalf("OnReleaseError called %d times (%v)", hooked.Load(), hookErr.Load())
		}
		if len(inspect(t, observer, key).Holders) == 0 {
			t.Fatal("the key is free although no release reached Redis: the fault did not happen")
		}
		p.Heal()
		healed := time.Now()
		eventually(t, every+2*time.Second, "key freed after healing", func() bool { return len(inspect(t, observer, key).Holders) == 0 })
		took := time.Since(healed)
		t.Logf("freed %v after healing (retry interval %v, lease %v)", took, every, ttl)
		if took > every+opt.ReleaseTimeout+500*time.Millisecond {
			t.Fatalf("freed %v after healing: more than one retry interval", took)
		}
	})
}

// TestReleaseLatch: a release that Redis does not answer (a partition,
// here a blackhole between Redis and a client at go-redis's defaults, or
// with a tight read timeout) fails with
// ErrUnavailable, calls OnReleaseError, and is retried in the background:
// once the partition heals, the key is freed within one retry interval,
// long before its 10 s lease would have expired (before, the release was
// not retried, and the key stayed held until go-redis's own retry, after
// its 3 s read timeout, or the lease's end).
func TestReleaseLatch(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	for _, k := range []clientKind{defaultKind, tightKind(150 * time.Millisecond)} {
		t.Run(k.name, func(t *testing.T) { testReleaseLatch(t, k) })
	}
}
