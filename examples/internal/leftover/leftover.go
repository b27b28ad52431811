// Package leftover checks that an example deletes, at exit, the keys it
// wrote to the user's Redis, and only those.
package leftover

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
)

// sentinel is a key of the user's own, which an example must not touch.
const sentinel = "users-own:key"

// guard starts the keys the lock engine keeps per server, whatever its
// prefix (see redisengine's restart guard): they are the server's, shared
// by every Locker on it, and not the example's to delete.
const guard = "routelock:restart-guard"

// Check runs f once per Redis of the test's own, an embedded miniredis and,
// when redis-server is on PATH, a real server, with REDIS_URL naming it and
// REDIS_CLUSTER_URL empty, as a user who points the example at a Redis of
// theirs. The Redis holds one key of the user's before f runs. Check fails
// the test unless, after f, that key is still there, unchanged, and no
// other is left but the engine's restart guard.
func Check(t *testing.T, f func(t *testing.T)) {
	servers := map[string]func(t *testing.T) string{
		"miniredis": func(t *testing.T) string { return redistest.Mini(t).Addr },
	}
	servers["redis"] = func(t *testing.T) string {
		if srv := redistest.OwnReal(t); srv != nil {
			return srv.Addr
		}
		return "" // no redis-server on PATH, which OwnReal logged
	}
	for _, name := range []string{"miniredis", "redis"} {
		t.Run(name, func(t *testing.T) {
			addr := servers[name](t)
			if addr == "" {
				return
			}
			t.Setenv("REDIS_URL", "redis://"+addr)
			t.Setenv("REDIS_CLUSTER_URL", "")
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			ctx := context.Background()
			if err := rdb.Set(ctx, sentinel, "mine", 0).Err(); err != nil {
				t.Fatal(err)
			}
			f(t)
			if t.Failed() {
				return
			}
			var left []string
			iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
			for n := 0; n < 100000 && iter.Next(ctx); n++ {
				if k := iter.Val(); k != sentinel && !strings.HasPrefix(k, guard) {
					left = append(left, k)
				}
			}
			if err := iter.Err(); err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				sort.Strings(left)
				t.Errorf("the example left %d keys in Redis: %s", len(left), strings.Join(left, " "))
			}
			if v, err := rdb.Get(ctx, sentinel).Result(); err != nil || v != "mine" {
				t.Errorf("the user's key %s: %q, %v; want it untouched", sentinel, v, err)
			}
		})
	}
}
