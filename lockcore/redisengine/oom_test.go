package redisengine

// The script runner (one runner, a NOSCRIPT fallback, a fallback that drops
// the "#!lua" shebang) under memory pressure and a flushed script cache,
// with go-redis's default client options.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestOOMRenewAndRelease: on a Redis at its maxmemory under the default
// policy (noeviction), a held lease stays held and its release frees the
// key: renewals and releases are flagged allow-oom, which a shebang script
// must be to run at all there. "shebang" is what the engine sends to
// Redis 7; "plain" runs the scripts without the shebang, as on Redis 6.
// Without the flag the renewals failed until the lease was declared lost,
// and the release left the key held until its TTL. A fresh acquire is
// refused (ErrUnavailable) and writes nothing.
func TestOOMRenewAndRelease(t *testing.T) {
	srv := redistest.OwnReal(t)
	if srv == nil {
		return
	}
	for _, variant := range []string{"shebang", "plain"} {
		t.Run(variant, func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = admin.Close() })
			const ttl = 300 * time.Millisecond
			l := lockerOn(t, rdb, redistest.Prefix(t), Options{TTL: ttl})
			if variant == "plain" {
				l.run.plain.Store(true)
			}
			key := mustKey(t, "oom", variant)
			ls, err := l.Acquire(ctx, key, lockcore.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			atMaxMemory(t, admin)
			select {
			case <-ls.Context().Done():
				t.Errorf("held lease lost while Redis was at maxmemory: %v", context.Cause(ls.Context()))
			case <-time.After(4 * ttl): // about 13 renewals
			}
			// A fresh lock cannot be taken: nothing of it is written.
			fresh := mustKey(t, "oom", variant, "fresh")
			if _, err := l.Acquire(ctx, fresh, lockcore.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrUnavailable) {
				t.Errorf("acquire under maxmemory: %v, want ErrUnavailable", err)
			}
			ks := l.redisKeys(fresh)
			if n, err := admin.Exists(ctx, ks[:]...).Result(); err != nil || n != 0 {
				t.Errorf("acquire under maxmemory left %d keys (%v)", n, err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Errorf("release under maxmemory: %v", err)
			}
			if info := inspect(t, l, key); len(info.Holders) > 0 {
				t.Errorf("key still held after its release (TTL %v)", info.TTL)
			}
		})
	}
}

// atMaxMemory puts the server of admin at maxmemory (1 byte, no eviction),
// so that every write that needs memory is refused, until the test ends.
func atMaxMemory(t *testing.T, admin *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.ConfigSet(context.Background(), "maxmemory", "0").Err() })
	if err := admin.Set(ctx, "oom:probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("server not at maxmemory: SET answered %v", err)
	}
}
