package redisengine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestNewcomerQueuesBehindWaitersOfVanishedHolder: the acquire script looks
// for queued waiters only when the lock's last fence says there may be
// some (see fence_read in lua/hold.lua). A waiter that joins marks it, and
// an acquisition that fails fast, which does not look, keeps the mark; so
// once the holder vanishes (its key deleted, as when its lease runs out),
// a newcomer that waits is queued behind the waiter rather than taking the
// free lock, whether or not a failing-fast acquisition took and released it
// in between, and whether or not the fence's retention ran out meanwhile (a
// fence that is gone counts as marked).
func TestNewcomerQueuesBehindWaitersOfVanishedHolder(t *testing.T) {
	for _, between := range []string{"nothing", "a fail-fast cycle", "the fence lapsed", "the fence lapsed and a fail-fast cycle"} {
		t.Run(strings.ReplaceAll(between, " ", "_"), func(t *testing.T) {
			redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
				ctx := context.Background()
				prefix := redistest.Prefix(t)
				// The waiter asks Redis again only when told, or after 3/10 of
				// its claim window: at the default (300ms), a recheck that
				// lands between the holder vanishing and the fail-fast cycle
				// takes the free lock, as it should, and the cycle then
				// finds it held. Its window is long enough that only the
				// releases below wake it.
				holder, waiter, newcomer := newLocker(t, b, prefix, Options{}), newLocker(t, b, prefix, Options{ClaimWindow: time.Minute}), newLocker(t, b, prefix, Options{})
				raw := b.Universal(t)
				key := mustKey(t, "mark", between)
				ks := holder.redisKeys(key)
				wait := lifecycle.Policy{Wait: 5 * time.Second}
				fence := func() string { return raw.Get(ctx, ks[2]).Val() }
				// Nor may the waiter be nudged by its own subscriptions
				// coming up (each has its waiters ask again): they are in
				// place before it queues.
				subscribed(t, waiter, key)

				// An uncontended cycle leaves the fence unmarked, once the
				// engine queues when it waits (its subscription is in place;
				// before, it acquires as failing fast, which keeps the mark
				// of a fence it did not find).
				unmarked := func() bool { v := fence(); return v != "" && !strings.HasSuffix(v, " q") }
				eventually(t, 5*time.Second, "an uncontended cycle leaves the fence unmarked", func() bool {
					ls, err := holder.Acquire(ctx, key, wait)
					if err != nil {
						t.Fatal(err)
					}
					if err := ls.Release(ctx); err != nil {
						t.Fatal(err)
					}
					return unmarked()
				})
				held, err := holder.Acquire(ctx, key, wait)
				if err != nil {
					t.Fatal(err)
				}
				if !unmarked() {
					t.Fatalf("fence %q under an uncontended hold, want a token without the mark", fence())
				}
				type result struct {
					ls  *lifecycle.Lease
					err error
				}
				first, second := make(chan result, 1), make(chan result, 1)
				go func() {
					ls, err := waiter.Acquire(ctx, key, wait)
					first <- result{ls, err}
				}()
				eventually(t, 5*time.Second, "the waiter queued", func() bool { return len(inspect(t, holder, key).Waiters) == 1 })
				if v := fence(); !strings.HasSuffix(v, " q") {
					t.Fatalf("fence %q with a waiter queued, want the mark", v)
				}

				// The holder vanishes: its hold is gone, and nobody is told.
				if err := raw.Del(ctx, ks[0]).Err(); err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(between, "the fence lapsed") {
					// Its retention ran out while the waiter waits: a fence
					// that is gone says waiters may be queued.
					if err := raw.Del(ctx, ks[2]).Err(); err != nil {
						t.Fatal(err)
					}
				}
				if strings.HasSuffix(between, "a fail-fast cycle") {
					ff, err := newcomer.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
					if err != nil {
						t.Fatalf("fail-fast on the free lock: %v", err)
					}
					if err := ff.Release(ctx); err != nil {
						t.Fatal(err)
					}
					if v := fence(); !strings.HasSuffix(v, " q") {
						t.Fatalf("fence %q after a fail-fast cycle with a waiter queued, want the mark kept", v)
					}
				}
				go func() {
					ls, err := newcomer.Acquire(ctx, key, wait)
					second <- result{ls, err}
				}()

				var w result
				select {
				case w = <-first:
				case n := <-second:
					if n.err == nil {
						_ = n.ls.Release(ctx)
					}
					t.Fatalf("the newcomer (err %v) got the lock before the waiter queued ahead of it", n.err)
				}
				if w.err != nil {
					t.Fatalf("waiter: %v", w.err)
				}
				eventually(t, 5*time.Second, "the newcomer queued", func() bool { return len(inspect(t, holder, key).Waiters) == 1 })
				select {
				case n := <-second:
					t.Fatalf("the newcomer returned (err %v) while the waiter holds", n.err)
				default:
				}
				if err := w.ls.Release(ctx); err != nil {
					t.Fatal(err)
				}
				n := <-second
				if n.err != nil {
					t.Fatalf("newcomer: %v", n.err)
				}
				if n.ls.Fence() <= w.ls.Fence() {
					t.Fatalf("newcomer's fence %d after the waiter's %d", n.ls.Fence(), w.ls.Fence())
				}
				if err := n.ls.Release(ctx); err != nil {
					t.Fatal(err)
				}
				_ = held // its hold was deleted under it; its release finds nothing
			})
		})
	}
}
