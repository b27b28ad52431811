package redisengine

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestLostHandOverNotification: a waiter whose hand-over message is lost
// on the way still claims its grant, by asking Redis again well within the
// claim window, long before the holder's lease would have ended.
func TestLostHandOverNotification(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		holder := newLocker(t, b, prefix, Options{})
		deaf := newLocker(t, b, prefix, Options{})
		// Once subscribed (a later subscription would make its waiters ask
		// Redis again), its notifier keeps to the channel it started with;
		// its waiters now name another in the queue, which a bystander
		// reads, so Redis counts the message delivered and the waiter never
		// sees it.
		rdb := b.Universal(t)
		ctx := context.Background()
		eventually(t, 5*time.Second, "deaf Engine subscribed", func() bool {
			return rdb.PubSubNumSub(ctx, deaf.channel).Val()[deaf.channel] == 1
		})
		key := mustKey(t, "k")
		deaf.channel = prefix + "bystander"
		var sink *redis.PubSub
		if sh := deaf.nf.sh; sh != nil {
			// On a Cluster, its shard channel of the key's slot, which
			// it does not subscribe to.
			slot := slotOf(deaf.redisKeys(key)[0])
			ch := deaf.channel + "{" + slotTag(slot) + "}"
			sh.chans[slot].Store(&ch)
			sh.off.Store(true)
			sink = rdb.SSubscribe(ctx, ch)
		} else {
			sink = rdb.Subscribe(ctx, deaf.channel)
		}
		t.Cleanup(func() { _ = sink.Close() })
		if _, err := sink.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		const ttl = 10 * time.Second
		ls, err := holder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		got, errc := acquireAsync(deaf, key, 20*time.Second)
		eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, holder, key).Waiters) == 1 })
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		// The lock now belongs to the waiter in Redis, for the claim window.
		info := inspect(t, holder, key)
		if len(info.Holders) != 1 || holdCount(info, ls.Token()) != 0 || info.TTL > holder.claimPX() {
			t.Fatalf("after release: %+v", info)
		}
		w := awaitLease(t, got, errc, 2*time.Second, "waiter never learned it holds the lock")
		if waited := time.Since(released); waited > holder.claimPX() {
			t.Fatalf("waiter learned after %v, past its grant of %v", waited, holder.claimPX())
		}
		claimed := inspect(t, holder, key)
		if w.Fence() != info.Fence || holdCount(claimed, w.Token()) != 1 || claimed.TTL <= holder.claimPX() {
			t.Fatalf("waiter holds fence %d; granted %+v, now %+v", w.Fence(), info, claimed)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if len(inspect(t, holder, key).Holders) > 0 {
			t.Fatal("held after the waiter released")
		}
	})
}

// TestResubscribeAsksAgain: hand-overs published while an Engine's
// subscription was down are lost, so when it is re-established every waiter
// asks Redis again. The waiter's hand-over is lost by construction (it
// names a channel nobody reads); resetting its Engine's connections makes
// the subscription come back, and the waiter must learn it holds the lock
// long before the holder's 10 s lease, its other way to learn, ends.
func TestResubscribeAsksAgain(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		holder := newLocker(t, b, prefix, Options{})
		p := faultproxy.Start(t, b.Addr)
		w, err := New(redis.NewClient(&redis.Options{Addr: p.Addr}), Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		rdb := b.Client(t)
		ctx := context.Background()
		eventually(t, 5*time.Second, "waiting Engine subscribed", func() bool {
			return rdb.PubSubNumSub(ctx, w.channel).Val()[w.channel] == 1
		})
		w.channel = prefix + "nobody-listens"
		key := mustKey(t, "k")
		h, err := holder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got, errc := acquireAsync(w, key, 20*time.Second)
		eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, holder, key).Waiters) == 1 })
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if p.ResetAll() == 0 {
			t.Fatal("no connection to reset")
		}
		ls := awaitLease(t, got, errc, 3*time.Second, "waiter after its Engine resubscribed")
		info := inspect(t, holder, key)
		if ls.Fence() != info.Fence || holdCount(info, ls.Token()) != 1 {
			t.Fatalf("waiter holds fence %d; Redis: %+v", ls.Fence(), info)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
