//go:build long

package redisengine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestLostAcquireReplyThenRefusedIsWithdrawn: a fail-fast Acquire takes a
// free lock, its reply is lost, and Redis's port then refuses connections
// for a while (a Redis or host restarting). The caller gets ErrUnavailable; the lock its call took in Redis must
// be given back soon after Redis answers again, not held by nobody until its
// TTL (10 s) ends: a waiter in another process gets it within the retry
// interval (1 s) after the heal.
func TestLostAcquireReplyThenRefusedIsWithdrawn(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, k := range healKinds {
			t.Run(k.name, func(t *testing.T) {
				prefix := redistest.Prefix(t)
				a, p := cutOffLocker(t, b, k, prefix, Options{})
				other := newLocker(t, b, prefix, Options{})
				warmScripts(t, a)
				key := mustKey(t, "refused", "1")

				// Redis down from then on: the port refuses connections and
				// the client's other pooled connections are cut, so that
				// every try after the first fails to dial.
				p.AfterLoss(func() { _ = p.Down(true) })
				p.LoseReplyTo(scriptSHA(t, a, "acquire"), 1)
				ls, err := a.Acquire(context.Background(), key, lifecycle.Policy{Wait: lockcore.FailFast})
				if err == nil {
					_ = ls.Release(context.Background())
					t.Fatal("Acquire succeeded although its reply was lost")
				}
				if !errors.Is(err, lockcore.ErrUnavailable) {
					t.Fatalf("Acquire: %v, want ErrUnavailable", err)
				}
				if p.LostReplies() != 1 {
					t.Fatalf("%d replies lost, want 1: the acquire never reached Redis", p.LostReplies())
				}
				if info := inspect(t, other, key); len(info.Holders) != 1 {
					t.Fatalf("Redis: %+v; want the lost attempt holding the lock", info)
				}

				const outage = 1500 * time.Millisecond
				heal := time.AfterFunc(outage, p.Heal)
				defer heal.Stop()
				start := time.Now()
				// Within the outage, one retry interval after it, and slack;
				// well before the lost attempt's lease (10 s) would end.
				bound := outage + time.Second + testClaimSlack
				got, errc := acquireAsync(other, key, 4*time.Second)
				ls = awaitLease(t, got, errc, 5*time.Second, "a waiter in another process after the heal")
				defer func() { _ = ls.Release(context.Background()) }()
				if d := time.Since(start); d > bound {
					t.Errorf("the waiter held the lock %v after the outage began, want within %v", d, bound)
				}
			})
		}
	})
}

// TestReturnedWaiterNotGrantedPastClaimWindow: a holder and a waiter in one
// process; Redis refuses that process's connections and the waiter's
// caller goes away, so its withdrawal cannot reach Redis. After the heal
// the holder releases: the lock must reach a live waiter in another
// process within the claim window, not go to the departed waiter for its
// whole TTL.
func TestReturnedWaiterNotGrantedPastClaimWindow(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, k := range healKinds {
			t.Run(k.name, func(t *testing.T) {
				prefix := redistest.Prefix(t)
				a, p := cutOffLocker(t, b, k, prefix, Options{})
				other := newLocker(t, b, prefix, Options{})
				key := mustKey(t, "departed", "1")
				ctx := context.Background()

				holder, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil {
					t.Fatal(err)
				}
				wctx, leave := context.WithCancel(ctx)
				defer leave()
				werr := make(chan error, 1)
				go func() {
					ls, err := a.Acquire(wctx, key, lifecycle.Policy{Wait: 8 * time.Second})
					if err == nil {
						_ = ls.Release(ctx)
					}
					werr <- err
				}()
				eventually(t, 2*time.Second, "the first waiter queued", func() bool { return len(inspect(t, other, key).Waiters) == 1 })
				got, errc := acquireAsync(other, key, 5*time.Second)
				eventually(t, 2*time.Second, "the second waiter queued", func() bool { return len(inspect(t, other, key).Waiters) == 2 })

				// The outage: the process's connections are cut and new ones
				// refused; its waiter's caller leaves meanwhile.
				p.Refuse(true)
				p.ResetAll()
				leave()
				select {
				case err := <-werr:
					if err == nil || !errors.Is(err, context.Canceled) {
						t.Fatalf("departed waiter: %v, want its context's cancellation", err)
					}
				case <-time.After(3 * time.Second):
					t.Fatal("the departed waiter did not return")
				}
				p.Heal()

				// The holder releases. Its client may still be reconnecting:
				// a release that fails is retried every second.
				released := time.Now()
				if err := holder.Release(ctx); err != nil {
					t.Logf("release right after the heal: %v (retried in the background)", err)
				}
				ls := awaitLease(t, got, errc, 5*time.Second, "the live waiter in another process")
				defer func() { _ = ls.Release(ctx) }()
				if d, bound := time.Since(released), time.Second+testClaimWindow+testClaimSlack; d > bound {
					t.Errorf("the live waiter held the lock %v after the release, want within %v", d, bound)
				}
				if ls.Fence() <= holder.Fence() {
					t.Errorf("fence %d after %d", ls.Fence(), holder.Fence())
				}
			})
		}
	})
}
