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

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestOOMCloseGate: on a Redis at its maxmemory under noeviction, closing
// a gate (lock.SoldOut) either closes it in Redis, where every Engine
// refuses the key, or fails for the caller and closes it nowhere: never
// on the closing Engine alone. With the shebang (Redis 7, the engine's
// own way) the script is flagged allow-oom and the gate closes for every
// Engine; without it ("plain", as on Redis 6) Redis refuses the write and
// the caller is told ErrUnavailable. Reopening under pressure works the
// same way.
func TestOOMCloseGate(t *testing.T) {
	srv := redistest.OwnReal(t)
	if srv == nil {
		return
	}
	for _, variant := range []string{"shebang", "plain"} {
		t.Run(variant, func(t *testing.T) {
			ctx := context.Background()
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = admin.Close() })
			client := func() redis.UniversalClient {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr})
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			p := redistest.Prefix(t)
			a, b := lockerOn(t, client(), p, Options{}), lockerOn(t, client(), p, Options{})
			if variant == "plain" {
				a.run.plain.Store(true)
			}
			key := mustKey(t, "oom", "gate", variant)
			ls, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			// b knows the gates (its first acquisition read them) and is
			// subscribed, before the server fills up.
			other, err := b.Acquire(ctx, mustKey(t, "oom", "other", variant), lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			_ = other.Release(ctx)
			if err := b.nf.ping(ctx); err != nil {
				t.Fatal(err)
			}
			atMaxMemory(t, admin)
			err = lifecycle.CloseGate(ls.Context(), 0)
			_, closedA := isClosed(a.GateOf(context.Background(), key))
			switch variant {
			case "shebang":
				if err != nil {
					t.Fatalf("closing a gate under maxmemory: %v, want it closed in Redis", err)
				}
				eventually(t, 5*time.Second, "the other Engine refusing the key", func() bool {
					_, err := b.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
					return errors.Is(err, lockcore.ErrGateClosed)
				})
				if gates, err := b.Gates(ctx); err != nil || len(gates) != 1 || gates[0].Key != key {
					t.Fatalf("Gates from Redis: %+v %v, want the gate of %v", gates, err, key)
				}
				if !closedA {
					t.Fatal("the closing Engine does not refuse the key")
				}
				if err := b.OpenGate(ctx, key); err != nil {
					t.Fatalf("opening a gate under maxmemory: %v", err)
				}
				if gates, err := a.Gates(ctx); err != nil || len(gates) != 0 {
					t.Fatalf("Gates after the open: %+v %v, want none", gates, err)
				}
			case "plain":
				if !errors.Is(err, lockcore.ErrUnavailable) {
					t.Fatalf("closing a gate under maxmemory without allow-oom: %v, want ErrUnavailable", err)
				}
				if closedA {
					t.Fatal("a gate that Redis refused closed on the closing Engine alone")
				}
			}
			_ = ls.Release(ctx)
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
