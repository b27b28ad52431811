package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestRedis force-releases a lock end to end, on miniredis and a real
// redis-server (when one is on PATH; ROUTELOCK_REQUIRE_REDIS=1 makes one
// required): a holder with a short lease in one engine, a waiter in
// another, the page and the JSON showing both, a POST through a chi router
// revoking the hold, the holder's context cancelled with ErrRevoked, the
// waiter holding with a greater fence, and the audit record in the JSON
// afterwards. No answer shows an owner token.
func TestRedis(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		newEngine := func() *redisengine.Engine {
			rdb := b.Universal(t)
			t.Cleanup(func() { rdb.Close() })
			e, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return e
		}
		holder, waiter, ops := newEngine(), newEngine(), newEngine()
		srv := mount(t, admin.Handler(ops, admin.Config{}))

		key, err := lockcore.NewKey("productID", "42")
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		lease, err := lifecycle.Serve(holder, nil).Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 600 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
		type acquired struct {
			lease *lifecycle.Lease
			err   error
		}
		got := make(chan acquired, 1)
		go func() {
			l, err := lifecycle.Serve(waiter, nil).Acquire(ctx, key, lifecycle.Policy{Wait: 20 * time.Second, TTL: 2 * time.Second})
			got <- acquired{l, err}
		}()

		// The waiter is queued in Redis when the JSON shows it.
		var in operate.Lock
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(10 * time.Second); ; {
			r := do(t, srv, "GET", "/admin/locks/productID:42", "")
			in = operate.Lock{}
			if r.code != 200 || json.Unmarshal([]byte(r.body), &in) != nil {
				t.Fatalf("GET: %d %s", r.code, r.body)
			}
			if len(in.Waiters) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the waiter never showed: %s", r.body)
			}
			<-tick.C
		}
		if !in.Held || len(in.Holders) != 1 || in.Fence != lease.Fence() || in.TTLMillis <= 0 || in.TTLMillis > 600 {
			t.Fatalf("lock %+v, want held with fence %d and at most 600 ms left", in, lease.Fence())
		}
		owner := in.Holders[0].Owner

		var l operate.List
		if r := do(t, srv, "GET", "/admin/locks?prefix=productID:", ""); r.code != 200 || json.Unmarshal([]byte(r.body), &l) != nil ||
			len(l.Locks) != 1 || l.Locks[0].Key != "productID:42" || len(l.Locks[0].Waiters) != 1 {
			t.Errorf("list: %d %s", r.code, r.body)
		}
		page := do(t, srv, "GET", "/admin/", "")
		for _, want := range []string{"<code>productID:42</code>", owner, "1 waiting", `action="./locks/productID:42/release"`} {
			if !strings.Contains(page.body, want) {
				t.Errorf("page lacks %q:\n%s", want, page.body)
			}
		}
		for _, r := range []resp{page, do(t, srv, "GET", "/admin/locks", ""), do(t, srv, "GET", "/admin/locks/productID:42", "")} {
			if strings.Contains(r.body, lease.Token()) {
				t.Fatalf("an answer shows the owner token:\n%s", r.body)
			}
		}

		// The force-release, as the page's form posts it.
		r := do(t, srv, "POST", "/admin/locks/productID:42/release", url.Values{"reason": {"admin test: holder stuck"}}.Encode(), formPost()...)
		if r.code != 200 || !strings.Contains(r.body, "Force-released <code>productID:42</code>, held by owner <code>"+owner+"</code>") || strings.Contains(r.body, lease.Token()) {
			t.Fatalf("release: %d %s", r.code, r.body)
		}
		select {
		case <-lease.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the holder's context was not cancelled")
		}
		if cause := context.Cause(lease.Context()); !errors.Is(cause, lockcore.ErrRevoked) {
			t.Errorf("holder's cause %v, want ErrRevoked", cause)
		}
		var a acquired
		select {
		case a = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not get the lock")
		}
		if a.err != nil {
			t.Fatal(a.err)
		}
		defer a.lease.Release(context.Background())
		if a.lease.Fence() <= lease.Fence() {
			t.Errorf("waiter's fence %d, not above the revoked %d", a.lease.Fence(), lease.Fence())
		}

		r = do(t, srv, "GET", "/admin/locks/productID:42", "")
		in = operate.Lock{}
		if r.code != 200 || json.Unmarshal([]byte(r.body), &in) != nil || len(in.Audit) == 0 {
			t.Fatalf("after: %d %s", r.code, r.body)
		}
		au := in.Audit[0]
		if au.Reason != "admin test: holder stuck" || au.Owner != owner || au.Fence != lease.Fence() || au.NewFence < lease.Fence() || au.At.IsZero() {
			t.Errorf("audit record %+v", au)
		}
		if in.Fence != a.lease.Fence() || in.Holders[0].Owner == owner {
			t.Errorf("after: %+v, want the waiter holding with fence %d", in, a.lease.Fence())
		}
		// Once the waiter lets go, nobody holds it.
		a.lease.Release(context.Background())
		if r := do(t, srv, "POST", "/admin/locks/productID:42/release", `{"reason": "again"}`, "Content-Type", jsonCT); r.code != 404 {
			t.Errorf("release of the free lock: %d %s", r.code, r.body)
		}
	})
}
