package lock_test

import (
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
)

// TestMalformedRedisURLFailsAtStartup: with no Locker set, a REDIS_URL that
// is not a Redis URL stops the program where the package-level route is
// built, with a message that shows the expected form and never the value
// (which may hold a password); before, every request panicked instead. A
// Locker set before the routes makes REDIS_URL irrelevant.
func TestMalformedRedisURLFailsAtStartup(t *testing.T) {
	lock.SetDefault(nil)
	t.Cleanup(func() { lock.SetDefault(nil) })
	for _, u := range []string{"localhost:16501", "redis://:s3cret pass@localhost:6379/0", "redis://localhost:6379/notadb"} {
		t.Setenv("REDIS_URL", u)
		func() {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.Contains(msg, "redis://[user:password@]host:6379/0") {
					t.Errorf("REDIS_URL=%q: building a route panicked with %v, want the expected form", u, r)
				}
				if strings.Contains(msg, "s3cret") {
					t.Errorf("the message repeats the password: %s", msg)
				}
			}()
			lock.ByParam("productID")
		}()
	}

	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	l := lock.New(rdb)
	t.Cleanup(func() { _ = l.Close() })
	lock.SetDefault(l)
	t.Setenv("REDIS_URL", "localhost:16501")
	lock.ByParam("productID") // no panic: the Locker set is used
}
