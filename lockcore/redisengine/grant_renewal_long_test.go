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

// TestGrantSurvivesOneLostRenewal: a waiter is handed the lock by a
// release of its own Engine; the grant lasts ClaimWindow*3/5 (600 ms) until
// the watchdog claims it, at a third of that. That first renewal's reply
// is lost (it ran: Redis keeps the hold for the whole TTL) and the network
// drops everything for 250 ms after. A failed renewal is sent again a tenth
// of the lease last confirmed later (60 ms), not a tenth of the TTL (1 s,
// past the grant's validity, where the lease was declared lost without a
// second try while Redis held it for 10 s): the handler's context stays
// live.
// Hand-over in memory is off: the grant comes through Redis.
func TestGrantSurvivesOneLostRenewal(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, k := range healKinds {
			t.Run(k.name, func(t *testing.T) {
				ctx := context.Background()
				prefix := redistest.Prefix(t)
				a, p := cutOffLocker(t, b, k, prefix, Options{LocalHandOvers: -1})
				warmScripts(t, a)
				if err := a.Check(ctx); err != nil { // every script cached: the renewal runs
					t.Fatal(err)
				}
				key := mustKey(t, "grant", "renewal")
				h1, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil {
					t.Fatal(err)
				}
				got, errc := acquireAsync(a, key, 5*time.Second)
				eventually(t, time.Second, "the waiter queued", func() bool { return len(inspect(t, a, key).Waiters) == 1 })

				p.AfterLoss(func() {
					p.Blackhole(true)
					time.AfterFunc(250*time.Millisecond, func() { p.Blackhole(false) }) // the fault's duration
				})
				p.LoseReplyTo([]byte(a.run.sha(renewScript)), 1)
				if err := h1.Release(ctx); err != nil {
					t.Fatal(err)
				}
				w := awaitLease(t, got, errc, time.Second, "the waiter")
				defer w.Release(ctx)
				granted := time.Now()
				select {
				case <-w.Context().Done():
					info, _ := a.Inspect(ctx, key)
					t.Fatalf("the waiter's lease ended %v after it was handed the lock: %v (lost replies %d); Redis: held=%v, holder count %d, pttl %v",
						time.Since(granted).Round(time.Millisecond), context.Cause(w.Context()), p.LostReplies(),
						len(info.Holders) > 0, holdCount(info, w.Token()), info.TTL)
				case <-time.After(2 * time.Second): // the bound of the check
				}
				if p.LostReplies() != 1 {
					t.Fatalf("lost replies %d, want 1: the fault did not happen", p.LostReplies())
				}
			})
		}
	})
}
