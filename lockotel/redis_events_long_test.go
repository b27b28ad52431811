//go:build long

package lockotel_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestRedisLeaseLost: the lock's key deleted in Redis behind its holder,
// whose short TTL has the next renewal due soon: the renewal finds it gone,
// the handler's context is cancelled with ErrLockLost, the request's span
// gets lock.lost (reason gone), routelock.lost and routelock.renewals count
// it, and the hold is no longer counted as held.
func TestRedisLeaseLost(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		r := newRig(t)
		prefix := redistest.Prefix(t)
		rdb := b.Universal(t)
		locker := observed(t, rdb, prefix, r.tel, lock.Defaults(lock.TTL(300*time.Millisecond)))
		url, entered := redisShop(t, r, locker)

		done := make(chan int, 1)
		go func() {
			code, _ := post(client(t, nil), bounded(t), url+"/products/42/buy")
			done <- code
		}()
		var e entry
		select {
		case e = <-entered:
		case <-time.After(bound):
			t.Fatal("the handler did not run")
		}
		if err := rdb.Del(bounded(t), prefix+"{productID:42}").Err(); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, done, http.StatusGone)
		if cause := context.Cause(e.ctx); !errors.Is(cause, lockcore.ErrLockLost) {
			t.Fatalf("the handler's context ended with %v, want ErrLockLost", cause)
		}
		r.wait(t)
		var req sdkSpan
		for _, sp := range r.spans("request") {
			if sp.SpanContext().Equal(e.span) {
				req = sp
			}
		}
		if req == nil {
			t.Fatal("no request span")
		}
		if ev := req.Events(); len(ev) != 1 || ev[0].Name != "lock.lost" {
			t.Fatalf("request span events %v, want lock.lost", ev)
		} else {
			wantAttrs(t, "lock.lost", ev[0].Attributes, map[string]any{"lock.resource": "productID", "lock.reason": "gone"})
		}
		m := r.collect(t)
		m.wantSum(t, "routelock.lost", 1, "lock.resource", "productID", "lock.reason", "gone")
		m.wantSum(t, "routelock.renewals", 1, "lock.resource", "productID", "lock.outcome", "lost")
		m.wantSum(t, "routelock.held", 0, "lock.resource", "productID")
		m.wantCount(t, "routelock.hold.duration", 1, "lock.resource", "productID")
	})
}
