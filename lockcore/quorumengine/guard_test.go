package quorumengine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestRestartGuard: masters just started without persistence look
// restarted without their data, and refuse fresh holds for MaxTTL: with
// two of three refusing, a fail-fast acquisition fails with a
// *lockcore.RestartGuardError (503), and one that may wait longer than
// the guard takes the lock once it ends; one master refusing does not
// keep a quorum from the other two.
func TestRestartGuard(t *testing.T) {
	var cs []redis.UniversalClient
	var srvs []*redistest.Server
	for range 3 {
		srv := redistest.OwnVolatile(t)
		if srv == nil {
			return // no redis-server here: miniredis has no uptime to guard by (OwnVolatile said so)
		}
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = c.Close() })
		cs, srvs = append(cs, c), append(srvs, srv)
	}
	ctx := context.Background()
	k, _ := lockcore.NewKey("productID", "5")
	// One master decided its guard, and had it end: it alone refuses none.
	e0 := newEngine(t, cs[:1], Options{Prefix: "guard:", TTL: time.Second, MaxTTL: 2 * time.Second})
	if _, err := e0.Take(ctx, lockcore.Request{Key: k, Token: "probe", Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrRestartGuard) {
		t.Fatalf("a master just started without persistence: %v, want ErrRestartGuard", err)
	}
	if err := cs[0].Del(ctx, guardKey).Err(); err != nil {
		t.Fatal(err)
	}

	e := newEngine(t, cs, Options{Prefix: "guard:", TTL: time.Second, MaxTTL: 2 * time.Second})
	// Masters 1 and 2 refuse: no quorum.
	_, err := e.Take(ctx, lockcore.Request{Key: k, Token: "fail-fast", Wait: lockcore.FailFast})
	var guard *lockcore.RestartGuardError
	if !errors.As(err, &guard) || !errors.Is(err, lockcore.ErrUnavailable) || guard.RetryAfter <= 0 || guard.RetryAfter > 2*time.Second {
		t.Fatalf("two guarded masters of three, fail-fast: %v, want a RestartGuardError of at most 2s", err)
	}
	start := time.Now()
	h, err := e.Take(ctx, lockcore.Request{Key: k, Token: "waits", Wait: 10 * time.Second})
	if err != nil {
		t.Fatalf("a wait longer than the guard: %v", err)
	}
	if d := time.Since(start); d > guard.RetryAfter+time.Second {
		t.Errorf("took the lock %v after the guard said %v", d, guard.RetryAfter)
	}
	_ = h.Release(ctx, nil)

	// Master 1 restarted empty: its guard refuses again, the others
	// make the quorum.
	if err := srvs[1].Restart(); err != nil {
		t.Fatal(err)
	}
	_ = cs[1].Ping(ctx).Err() // the client's connections to the old process fail once
	h, err = e.Take(ctx, lockcore.Request{Key: k, Token: "one guarded", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatalf("one guarded master of three: %v, want the lock", err)
	}
	if pttl := cs[1].PTTL(ctx, guardKey).Val(); pttl <= 0 {
		t.Errorf("the master that lost its scripts decided no guard (pttl %v)", pttl)
	}
	_ = h.Release(ctx, nil)
}
