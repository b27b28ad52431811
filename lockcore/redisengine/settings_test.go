package redisengine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestEvictingServerRefused: a Redis that evicts keys when full (the
// maxmemory-policy of the big managed services, volatile-lru, with a
// maxmemory set) deletes a held lock under memory pressure and lets a second
// owner in. Check says so (ErrMisconfigured), and Acquire refuses to take
// locks there rather than hand out holds it cannot keep; once the policy is
// noeviction, both work. go-redis at its defaults and with
// ContextTimeoutEnabled, by turns.
func TestEvictingServerRefused(t *testing.T) {
	srv := redistest.OwnReal(t)
	if srv == nil {
		return
	}
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	set := func(policy, max string) {
		t.Helper()
		if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ConfigSet(ctx, "maxmemory", max).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, policy := range []string{"volatile-lru", "allkeys-lru", "volatile-ttl"} {
		k := healKinds[i%len(healKinds)]
		t.Run(policy+"/"+k.name, func(t *testing.T) {
			set(policy, "1gb")
			l := lockerOn(t, k.client(t, srv.Addr), redistest.Prefix(t), Options{})
			err := l.Check(ctx)
			if !errors.Is(err, lockcore.ErrMisconfigured) || !strings.Contains(err.Error(), policy) {
				t.Fatalf("Check on a server with maxmemory-policy %s: %v; want ErrMisconfigured naming the policy", policy, err)
			}
			key := mustKey(t, "evict", policy)
			ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err == nil {
				_ = ls.Release(ctx)
				t.Fatal("Acquire took a lock on a server that may evict it")
			}
			if !errors.Is(err, lockcore.ErrMisconfigured) || errors.Is(err, lockcore.ErrUnavailable) {
				t.Fatalf("Acquire: %v; want ErrMisconfigured alone", err)
			}
			if n, _ := admin.Exists(ctx, l.redisKeys(key)[0]).Result(); n != 0 {
				t.Errorf("the refused Acquire wrote its hold")
			}

			set("noeviction", "1gb")
			if err := l.Check(ctx); err != nil {
				t.Fatalf("Check once the policy is noeviction: %v", err)
			}
			ls, err = l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatalf("Acquire once the policy is noeviction: %v", err)
			}
			_ = ls.Release(ctx)
		})
	}

	// A new Engine learns the setting by itself, without Check: its very
	// first Acquire is refused.
	for _, k := range healKinds {
		t.Run("without Check/"+k.name, func(t *testing.T) {
			set("volatile-lru", "1gb")
			t.Cleanup(func() { set("noeviction", "0") })
			l := lockerOn(t, k.client(t, srv.Addr), redistest.Prefix(t), Options{})
			ls, err := l.Acquire(ctx, mustKey(t, "evict", "unchecked"), lifecycle.Policy{Wait: lockcore.FailFast})
			if err == nil {
				_ = ls.Release(ctx)
				t.Fatal("the first Acquire of an Engine never checked took a lock on a server that may evict it")
			}
			if !errors.Is(err, lockcore.ErrMisconfigured) {
				t.Fatalf("first Acquire: %v; want ErrMisconfigured", err)
			}
		})
	}

	// Without a memory limit nothing is evicted, whatever the policy.
	t.Run("no maxmemory", func(t *testing.T) {
		set("allkeys-lru", "0")
		t.Cleanup(func() { set("noeviction", "0") })
		l := lockerOn(t, redis.NewClient(&redis.Options{Addr: srv.Addr}), redistest.Prefix(t), Options{})
		if err := l.Check(ctx); err != nil {
			t.Fatalf("Check with allkeys-lru and no maxmemory: %v", err)
		}
	})
}

// TestEvictingParsesInfo: what counts as a server that may evict, from
// INFO memory's text.
func TestEvictingParsesInfo(t *testing.T) {
	for _, c := range []struct {
		info  string
		evict bool
	}{
		{"# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:volatile-lru\r\n", false},
		{"# Memory\r\nmaxmemory:1048576\r\nmaxmemory_policy:noeviction\r\n", false},
		{"# Memory\r\nmaxmemory:1048576\r\nmaxmemory_policy:volatile-lru\r\n", true},
		{"# Memory\r\nmaxmemory:1048576\r\nmaxmemory_policy:allkeys-random\r\n", true},
		{"# Memory\r\nmaxmemory:1048576\r\n", false}, // does not say
		{"", false},
	} {
		if err := evicting(c.info); (err != nil) != c.evict || err != nil && !errors.Is(err, lockcore.ErrMisconfigured) {
			t.Errorf("evicting(%q) = %v, want evicting %v", c.info, err, c.evict)
		}
	}
}

// TestRestartGuardNeedsItsACL: a Redis ACL that denies the Lockers' user
// INFO (or the guard's keys) leaves the restart guard undecidable: a lock
// is refused as misconfigured (500), never taken unguarded.
func TestRestartGuardNeedsItsACL(t *testing.T) {
	srv := redistest.OwnVolatile(t)
	if srv == nil {
		return
	}
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	for i, acl := range [][]any{
		{"ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info"},
		{"ACL", "SETUSER", "prefixonly", "on", ">pw", "~t:*", "&*", "+@all"},
	} {
		if err := admin.Do(ctx, acl...).Err(); err != nil {
			t.Fatal(err)
		}
		user := acl[2].(string)
		k := healKinds[i%len(healKinds)]
		t.Run(user+"/"+k.name, func(t *testing.T) {
			o := k.opt(srv.Addr)
			o.Username, o.Password = user, "pw"
			c := redis.NewClient(o)
			t.Cleanup(func() { _ = c.Close() })
			l := lockerOn(t, c, redistest.Prefix(t), Options{})
			ls, err := l.Acquire(ctx, mustKey(t, "acl", user), lifecycle.Policy{Wait: lockcore.FailFast})
			if err == nil {
				_ = ls.Release(ctx)
				t.Fatal("a lock was taken although the restart guard could not be decided")
			}
			if !errors.Is(err, lockcore.ErrMisconfigured) || errors.Is(err, lockcore.ErrUnavailable) {
				t.Fatalf("Acquire: %v; want ErrMisconfigured alone", err)
			}
		})
	}
}
