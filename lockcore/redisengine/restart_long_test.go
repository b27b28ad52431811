//go:build long

package redisengine

import (
	"context"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestRestartWithoutDataLetsNobodyIn: Redis is killed (SIGKILL) while a
// lock is held and a process waits for it, and restarts empty (no
// persistence). The waiter must not hold the lock while the first holder's
// context is live: the restarted server refuses fresh holds until every
// lease it may have granted before could have ended (its restart guard), by
// when the holder's context has ended at the latest. Then the waiter gets
// in, with a greater fencing token. go-redis at its defaults and with
// ContextTimeoutEnabled; the restart comes at several points of the lease.
func TestRestartWithoutDataLetsNobodyIn(t *testing.T) {
	srv := redistest.OwnVolatile(t)
	if srv == nil {
		return
	}
	const ttl = 2 * time.Second
	for _, k := range healKinds {
		for _, into := range []time.Duration{0, ttl / 5, ttl / 2} {
			t.Run(k.name+"/"+into.String(), func(t *testing.T) {
				ctx := context.Background()
				prefix := redistest.Prefix(t)
				holderEng := lockerOn(t, k.client(t, srv.Addr), prefix, Options{TTL: ttl, MaxTTL: ttl})
				waiterEng := lockerOn(t, k.client(t, srv.Addr), prefix, Options{TTL: ttl, MaxTTL: ttl})
				key := mustKey(t, "restart", "held")

				var holder *lifecycle.Lease
				var err error
				eventually(t, 3*ttl, "the holder's acquire (a guard from the last start may be up)", func() bool {
					holder, err = holderEng.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
					return err == nil
				})
				got, errc := acquireAsync(waiterEng, key, 4*ttl)
				eventually(t, time.Second, "the waiter queued", func() bool { return len(inspect(t, waiterEng, key).Waiters) == 1 })
				if into > 0 {
					select {
					case <-holder.Context().Done():
						t.Fatalf("the holder lost its lease before the restart: %v", holder.Err())
					case <-time.After(into): // the point of the lease the restart comes at
					}
				}
				if err := srv.Restart(); err != nil {
					t.Fatal(err)
				}
				restarted := time.Now()
				w := awaitLease(t, got, errc, 4*ttl, "the waiter after the restart")
				defer w.Release(ctx)
				if err := holder.Context().Err(); err == nil {
					t.Fatalf("the waiter holds the lock %v after the restart while the first holder's context is live", time.Since(restarted))
				}
				t.Logf("the waiter held the lock %v after the restart; the holder's context had ended (%v)", time.Since(restarted), context.Cause(holder.Context()))
				if w.Fence() <= holder.Fence() {
					t.Errorf("fence %d after the restart, %d before", w.Fence(), holder.Fence())
				}
				_ = holder.Release(ctx)
			})
		}
	}
}
