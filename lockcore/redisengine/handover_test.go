package redisengine

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestLocalHandOverPublishesNothing: a release that hands the lock to a
// waiter of the same Engine wakes it from the reply and publishes nothing;
// one that hands it to another Engine's waiter publishes on that Engine's
// channel. An observer subscribed to every Engine channel must see the
// second hand-over's message first.
// Hand-over in memory is off: these are hand-overs through Redis.
func TestLocalHandOverPublishesNothing(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		a := newLocker(t, b, prefix, Options{LocalHandOvers: -1})
		other := newLocker(t, b, prefix, Options{LocalHandOvers: -1})
		ctx := context.Background()
		rdb := b.Universal(t)
		// The other Engine's waiter learns of its hand-over by message.
		eventually(t, 5*time.Second, "other Engine subscribed", func() bool {
			return rdb.PubSubNumSub(ctx, other.channel).Val()[other.channel] == 1
		})
		key := mustKey(t, "k")
		// On a Cluster, hand-overs go to the Engines' shard channels of
		// the key's slot.
		want := other.channel
		obs := rdb.PSubscribe(ctx, prefix+"notify:*")
		if other.nf.sh != nil {
			_ = obs.Close()
			slot := slotOf(a.redisKeys(key)[0])
			want = *other.nf.sh.channel(slot)
			obs = rdb.SSubscribe(ctx, *a.nf.sh.channel(slot), want)
		}
		t.Cleanup(func() { _ = obs.Close() })
		if _, err := obs.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		const ttl = 10 * time.Second // a waiter not woken would sleep this long
		h, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		localGot, localErr := acquireAsync(a, key, 20*time.Second)
		eventually(t, 5*time.Second, "local waiter queued", func() bool { return len(inspect(t, a, key).Waiters) == 1 })
		remoteGot, remoteErr := acquireAsync(other, key, 20*time.Second)
		eventually(t, 5*time.Second, "remote waiter queued", func() bool { return len(inspect(t, a, key).Waiters) == 2 })

		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		local := awaitLease(t, localGot, localErr, 3*time.Second, "local waiter")
		info := inspect(t, a, key)
		if local.Fence() != info.Fence || holdCount(info, local.Token()) != 1 {
			t.Fatalf("local waiter holds fence %d; Redis: %+v", local.Fence(), info)
		}
		if err := local.Release(ctx); err != nil {
			t.Fatal(err)
		}
		remote := awaitLease(t, remoteGot, remoteErr, 3*time.Second, "waiter of the other Engine")
		if remote.Fence() <= local.Fence() {
			t.Fatalf("fences %d then %d", local.Fence(), remote.Fence())
		}

		mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		m, err := obs.ReceiveMessage(mctx)
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(m.Payload); m.Channel != want || len(f) != 3 || f[1] != strconv.FormatInt(remote.Fence(), 10) {
			t.Fatalf("first message %q on %s; want the hand-over of fence %d on %s (the local one publishes nothing)",
				m.Payload, m.Channel, remote.Fence(), want)
		}
		if err := remote.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if len(inspect(t, a, key).Holders) > 0 {
			t.Fatal("held after every release")
		}
	})
}

// loseReply lets the next call of script s run in Redis and then reports
// its reply lost, as a connection that broke after sending would.
type loseReply struct {
	armed *atomic.Bool
	s     *script
}

func (h loseReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// It ran when Redis answered without an error (not NOSCRIPT).
		if a := cmd.Args(); len(a) > 1 && err == nil {
			s, _ := scriptOf(a[1])
			if s == nil {
				s = scriptOfSource(a[1]) // sent with EVAL
			}
			if s == h.s && h.armed.CompareAndSwap(true, false) {
				cmd.SetErr(io.ErrUnexpectedEOF)
				return io.ErrUnexpectedEOF
			}
		}
		return err
	}
}

// TestLostReleaseReply: when the reply of a release that handed the lock
// to a waiter of the same Engine is lost, nothing was published, so the
// Engine's waiters on the key ask Redis again at once; the waiter learns it
// holds the lock well before the holder's 10 s lease would have ended.
// Hand-over in memory is off: this is a hand-over through Redis.
func TestLostReleaseReply(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		var armed atomic.Bool
		rdb := b.Universal(t)
		rdb.AddHook(loseReply{&armed, releaseScript})
		l, err := New(rdb, Options{Prefix: redistest.Prefix(t), LocalHandOvers: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		ctx := context.Background()
		key := mustKey(t, "k")
		h, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got, errc := acquireAsync(l, key, 20*time.Second)
		eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, l, key).Waiters) == 1 })

		armed.Store(true)
		if err := h.Release(ctx); !errors.Is(err, lockcore.ErrUnavailable) {
			t.Fatalf("release with its reply lost: %v, want ErrUnavailable", err)
		}
		if armed.Load() {
			t.Fatal("the release never reached the hook")
		}
		w := awaitLease(t, got, errc, 3*time.Second, "waiter after a lost release reply")
		info := inspect(t, l, key)
		if w.Fence() != info.Fence || len(info.Holders) != 1 || holdCount(info, w.Token()) != 1 {
			t.Fatalf("waiter holds fence %d; Redis: %+v", w.Fence(), info)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if len(inspect(t, l, key).Holders) > 0 {
			t.Fatal("held after the waiter released")
		}
	})
}
