package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
)

// TestRedisFromEnv: the client of REDIS_URL reaches that server and
// applies context deadlines; two variables set at once, or a malformed
// one, is an error that names the variable and never its value.
func TestRedisFromEnv(t *testing.T) {
	b := redistest.Mini(t)
	t.Setenv("REDIS_URL", "redis://"+b.Addr+"/0")
	t.Setenv("REDIS_CLUSTER_URL", "")
	t.Setenv("REDIS_SENTINEL_URL", "")
	rdb, err := lock.RedisFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	c, ok := rdb.(*redis.Client)
	if !ok {
		t.Fatalf("REDIS_URL gave a %T, want *redis.Client", rdb)
	}
	if o := c.Options(); o.Addr != b.Addr || !o.ContextTimeoutEnabled {
		t.Errorf("client of %s, ContextTimeoutEnabled %v; want %s, true", o.Addr, o.ContextTimeoutEnabled, b.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil || b.Mini.Exists("k") == false {
		t.Errorf("the client does not reach REDIS_URL's server: %v", err)
	}

	t.Setenv("REDIS_CLUSTER_URL", "redis://:secret-pw@127.0.0.1:1")
	if _, err := lock.RedisFromEnv(); err == nil || !strings.Contains(err.Error(), "REDIS_URL and REDIS_CLUSTER_URL") || strings.Contains(err.Error(), "secret-pw") {
		t.Errorf("two variables set: %v", err)
	}
	t.Setenv("REDIS_CLUSTER_URL", "")
	t.Setenv("REDIS_URL", "http://:secret-pw@host")
	_, err = lock.RedisFromEnv()
	if err == nil || !strings.Contains(err.Error(), "REDIS_URL") || strings.Contains(err.Error(), "secret-pw") || errors.Unwrap(err) == nil {
		t.Errorf("malformed REDIS_URL: %v", err)
	}
}
