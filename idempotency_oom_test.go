package lock_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/middleware"
)

// TestIdempotencyReplayAtMaxMemory: a retry of a request whose response
// is stored is answered with it while Redis is at its maxmemory under
// noeviction: reading a stored response writes nothing, though the
// lock's acquisition, which Redis then refuses whole, would.
func TestIdempotencyReplayAtMaxMemory(t *testing.T) {
	srv := redistest.OwnReal(t)
	if srv == nil {
		return
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	app := payments(t, rdb, redistest.Prefix(t), newFencedStore(), middleware.IdempotencyConfig{})
	first := idemPost(t, app.Client(), app.URL+"/payments/acct-1", "oom-1", "amount=1")
	if first.status != http.StatusCreated {
		t.Fatalf("the first request: %d %s", first.status, first.body)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.ConfigSet(context.Background(), "maxmemory", "0").Err() })
	if err := rdb.Set(ctx, "oom:probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("server not at maxmemory: SET answered %v", err)
	}
	retry := idemPost(t, app.Client(), app.URL+"/payments/acct-1", "oom-1", "amount=1")
	if retry.status != http.StatusCreated || !retry.replayed || string(retry.body) != string(first.body) {
		t.Fatalf("a retry at maxmemory: %d (replayed %v) %s; want the stored 201 %s replayed", retry.status, retry.replayed, retry.body, first.body)
	}
}
