//go:build long

package redisengine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestRestartGuardPerRouteTTL: Engines with identical options (default
// TTL 1 s) in two processes; a route asks for lock.TTL(8s). Process A holds
// that route's lock. Redis restarts empty. Process B's first call after the
// restart is on a route with the default TTL: it sets the guard to B's
// longest lease so far, 1 s. After that second B takes the 8 s route's lock
// while A's holder's context is live (A renews only at 2 s).
func TestRestartGuardPerRouteTTL(t *testing.T) {
	srv := redistest.OwnVolatile(t)
	if srv == nil {
		return
	}
	const def, long = 500 * time.Millisecond, 4 * time.Second
	for _, k := range healKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			prefix := redistest.Prefix(t)
			a := lockerOn(t, k.client(t, srv.Addr), prefix, Options{TTL: def, MaxTTL: long})
			b := lockerOn(t, k.client(t, srv.Addr), prefix, Options{TTL: def, MaxTTL: long})
			key := mustKey(t, "restart", "long-route")
			other := mustKey(t, "restart", "short-route")
			// Scripts loaded and this start's guard decided with 1 s.
			if err := b.Check(ctx); err != nil {
				t.Fatal(err)
			}

			var holder *lifecycle.Lease
			var err error
			eventually(t, 2*long, "the holder's acquire (the guard of the server's start lets it in at its TTL)", func() bool {
				holder, err = a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: long})
				return err == nil
			})
			defer holder.Release(ctx)
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			// B's first call after the restart: a default-TTL route.
			if ls, err := b.Acquire(ctx, other, lifecycle.Policy{Wait: lockcore.FailFast}); err == nil {
				_ = ls.Release(ctx)
			}
			ls, err := b.Acquire(ctx, key, lifecycle.Policy{TTL: long, Wait: 2 * long})
			if err != nil {
				t.Fatalf("process B's acquire of the long route: %v", err)
			}
			defer ls.Release(ctx)
			if holder.Context().Err() == nil {
				t.Fatalf("process B holds the long route's lock %v after the restart (fence %d) while A's holder's context is live (fence %d)",
					time.Since(restarted), ls.Fence(), holder.Fence())
			}
			t.Logf("B held %v after the restart; the holder's context had ended (%v)", time.Since(restarted), context.Cause(holder.Context()))
		})
	}
}

// TestRestartGuardUptimeRounding: Redis reports its uptime in whole
// seconds of its clock, so it reads 1 s a few ms after a start made just
// before a second's mark. A holder's lock (TTL 1 s, renewed about every
// 300 ms) is lost to a restart without persistence made at .88 of a
// second; the first call after the uptime reads 1 comes from another
// process. The guard must still keep that process out until the server is
// as old as the longest lease, 1 s, not let it in at once while the
// holder's context is live (it learns of the loss at its next renewal).
func TestRestartGuardUptimeRounding(t *testing.T) {
	srv := redistest.OwnVolatile(t)
	if srv == nil {
		return
	}
	const ttl = time.Second
	for _, k := range healKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			prefix := redistest.Prefix(t)
			a := lockerOn(t, k.client(t, srv.Addr), prefix, Options{TTL: ttl, MaxTTL: ttl})
			b := lockerOn(t, k.client(t, srv.Addr), prefix, Options{TTL: ttl, MaxTTL: ttl})
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer admin.Close()
			key := mustKey(t, "restart", "uptime")
			// The server's start guard lets a hold in once it is ttl old.
			eventually(t, 3*ttl, "a first hold on the server", func() bool {
				l, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
				if err == nil {
					_ = l.Release(ctx)
				}
				return err == nil
			})
			// Place the restart at .88 of a wall-clock second: Redis's
			// uptime then reads 1 about 0.1 s after it.
			d := 880*time.Millisecond - time.Duration(time.Now().Nanosecond())
			if d < 0 {
				d += time.Second
			}
			time.Sleep(d)
			holder, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Release(ctx)
			launched := time.Now()
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			eventually(t, 2*time.Second, "Redis's uptime reading 1 s", func() bool {
				info, err := admin.Info(ctx, "server").Result()
				return err == nil && !strings.Contains(info, "uptime_in_seconds:0\r")
			})
			var ls *lifecycle.Lease
			eventually(t, 3*ttl, "process B's fail-fast acquire", func() bool {
				ls, err = b.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
				return err == nil
			})
			defer ls.Release(ctx)
			if holder.Context().Err() == nil {
				t.Fatalf("process B holds the lock %v after the restart (fence %d) while the holder's context is live (fence %d)",
					time.Since(launched), ls.Fence(), holder.Fence())
			}
			if since := time.Since(launched); since < ttl {
				t.Fatalf("process B holds the lock %v after the restart: the server is younger than the longest lease, %v", since, ttl)
			}
		})
	}
}

// TestRestartGuardOtherPrefix: two Lockers with different Prefixes
// share one Redis (two services, or two tenants of one). Redis is killed
// while prefix B's lock is held and restarts empty. The first call after
// the restart comes from prefix A's Engine: it meets NOSCRIPT, sets A's
// guard and loads the scripts into the server's (shared) cache. Prefix B's
// Engines never meet NOSCRIPT again, so B gets no guard at all, and a
// second B process takes the lock while the first holder's context is live.
func TestRestartGuardOtherPrefix(t *testing.T) {
	srv := redistest.OwnVolatile(t)
	if srv == nil {
		return
	}
	const ttl = 4 * time.Second // renewal at ttl/3, 1.3 s: well after the restart
	for _, k := range healKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			pa, pb := redistest.Prefix(t)+"a:", redistest.Prefix(t)+"b:"
			// Warm up on the fresh server with a short-TTL Engine of prefix B,
			// so that its guard from this start is short.
			warm := lockerOn(t, k.client(t, srv.Addr), pb, Options{TTL: 50 * time.Millisecond, MaxTTL: 50 * time.Millisecond})
			if err := warm.Check(ctx); err != nil {
				t.Fatal(err)
			}
			other := lockerOn(t, k.client(t, srv.Addr), pa, Options{TTL: ttl, MaxTTL: ttl})
			holderEng := lockerOn(t, k.client(t, srv.Addr), pb, Options{TTL: ttl, MaxTTL: ttl})
			secondEng := lockerOn(t, k.client(t, srv.Addr), pb, Options{TTL: ttl, MaxTTL: ttl})
			key := mustKey(t, "restart", "prefix")

			var holder *lifecycle.Lease
			var err error
			eventually(t, 2*ttl, "the holder's acquire (the guard of the server's start lets it in at ttl)", func() bool {
				holder, err = holderEng.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
				return err == nil
			})
			defer holder.Release(ctx)
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			// Prefix A's service makes the first call after the restart.
			if err := other.Check(ctx); err != nil {
				t.Logf("other prefix's Check: %v", err)
			}
			ls, err := secondEng.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Logf("second acquire refused (%v): the guard held", err)
				return
			}
			defer ls.Release(ctx)
			if holder.Context().Err() == nil {
				t.Fatalf("a second process of prefix B holds the lock %v after the restart (fence %d) while the first holder's context is live (fence %d)",
					time.Since(restarted), ls.Fence(), holder.Fence())
			}
		})
	}
}
