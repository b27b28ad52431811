package redisengine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// lateHook holds back the replies of acquire calls by late while it is on:
// a server, or a client, slower than the lease it grants.
type lateHook struct {
	on   atomic.Bool
	late time.Duration
	seen atomic.Int64 // acquire replies held back
}

func (h *lateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		err := next(ctx, c)
		h.hold([]redis.Cmder{c})
		return err
	}
}

func (h *lateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.hold(cmds)
		return err
	}
}

func (h *lateHook) hold(cmds []redis.Cmder) {
	if !h.on.Load() {
		return
	}
	for _, c := range cmds {
		a := c.Args()
		if len(a) > 1 && (a[1] == acquireScript.sha[0] || a[1] == acquireScript.sha[1] ||
			a[1] == acquireScript.src[0] || a[1] == acquireScript.src[1]) {
			h.seen.Add(1)
			<-time.After(h.late) // the fault: the reply arrives this late
			return
		}
	}
}

// TestAcquireAnsweredAfterItsLease: an acquisition whose grant comes back
// after the lease it granted has run out (Options.Timeout longer than the
// TTL, and a reply slower than the TTL) fails with ErrUnavailable and hands
// out no lease: Redis may already have let the key go to another owner.
// Before, Acquire returned that lease as held, and its holder entered
// beside the next owner until the watchdog noticed. The key is free for
// others afterwards.
func TestAcquireAnsweredAfterItsLease(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 100 * time.Millisecond
		hook := &lateHook{late: 2 * ttl}
		rdb := redis.NewClient(&redis.Options{Addr: b.Addr})
		rdb.AddHook(hook)
		t.Cleanup(func() { _ = rdb.Close() })
		prefix := redistest.Prefix(t)
		l := lockerOn(t, rdb, prefix, Options{TTL: ttl, Timeout: 2 * time.Second})
		other := lockerOn(t, b.Client(t), prefix, Options{TTL: ttl})
		key := mustKey(t, "late")
		// A first lock on the client, answered in time: the settings are read.
		ls, err := l.Acquire(context.Background(), key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(context.Background()); err != nil {
			t.Fatal(err)
		}

		hook.on.Store(true)
		ls, err = l.Acquire(context.Background(), key, lifecycle.Policy{Wait: lockcore.FailFast})
		hook.on.Store(false)
		if hook.seen.Load() == 0 {
			t.Fatal("no acquire reply was held back")
		}
		if err == nil {
			t.Fatalf("Acquire answered %v after its %v lease: a lease (fence %d, Err %v), want ErrUnavailable", hook.late, ttl, ls.Fence(), ls.Err())
		}
		if !errors.Is(err, lockcore.ErrUnavailable) {
			t.Fatalf("Acquire answered after its lease: %v, want ErrUnavailable", err)
		}
		eventually(t, 5*time.Second, "the key free for another engine", takes(other, key))
	})
}

// TestAcquireAnsweredWithLittleLeaseLeft: an acquisition answered with less
// than a tenth of its lease still valid fails with ErrUnavailable and
// hands out no lease: its first renewal would most likely land after the
// lease ran out, its handler begun. Before, Acquire returned the lease
// with 5% of its TTL left. One answered at half its lease is handed out,
// and stays held past the TTL it was granted (the watchdog renews it).
func TestAcquireAnsweredWithLittleLeaseLeft(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 400 * time.Millisecond
		hook := &lateHook{}
		rdb := redis.NewClient(&redis.Options{Addr: b.Addr})
		rdb.AddHook(hook)
		t.Cleanup(func() { _ = rdb.Close() })
		prefix := redistest.Prefix(t)
		l := lockerOn(t, rdb, prefix, Options{TTL: ttl, Timeout: 2 * time.Second})
		key := mustKey(t, "late")
		// A first lock answered in time: the settings are read.
		ls, err := l.Acquire(context.Background(), key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		slowed := func(late time.Duration) (*lifecycle.Lease, error) {
			hook.late = late
			seen := hook.seen.Load()
			hook.on.Store(true)
			ls, err := l.Acquire(context.Background(), key, lifecycle.Policy{Wait: lockcore.FailFast})
			hook.on.Store(false)
			if hook.seen.Load() == seen {
				t.Fatal("no acquire reply was held back")
			}
			return ls, err
		}

		ls, err = slowed(ttl * 85 / 100)
		if err == nil {
			_ = ls.Release(context.Background())
			t.Fatalf("Acquire answered at 85%% of its %v lease: a lease (fence %d), want ErrUnavailable", ttl, ls.Fence())
		}
		if !errors.Is(err, lockcore.ErrUnavailable) {
			t.Fatalf("Acquire answered at 85%% of its lease: %v, want ErrUnavailable", err)
		}

		// Given back: the key is free again within a TTL.
		eventually(t, 5*time.Second, "the key free again", takes(l, key))

		ls, err = slowed(ttl / 2)
		if err != nil {
			t.Fatalf("Acquire answered at half its lease: %v, want a lease", err)
		}
		defer func() { _ = ls.Release(context.Background()) }()
		select {
		case <-ls.Context().Done():
			t.Fatalf("the lease answered at half its TTL was lost: %v", ls.Err())
		case <-time.After(ttl): // the granted TTL passes: renewed meanwhile
		}
	})
}

// slowSendHook holds back, once armed, the next release call on its way
// to Redis by slow: a client stalled before its release went out.
type slowSendHook struct {
	armed atomic.Bool
	slow  time.Duration
}

func (h *slowSendHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowSendHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		h.hold([]redis.Cmder{c})
		return next(ctx, c)
	}
}

func (h *slowSendHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold(cmds)
		return next(ctx, cmds)
	}
}

func (h *slowSendHook) hold(cmds []redis.Cmder) {
	for _, c := range cmds {
		a := c.Args()
		if len(a) > 1 && (a[1] == releaseScript.sha[0] || a[1] == releaseScript.sha[1] ||
			a[1] == releaseScript.src[0] || a[1] == releaseScript.src[1]) && h.armed.CompareAndSwap(true, false) {
			<-time.After(h.slow) // the fault: the release goes out this late
			return
		}
	}
}

// TestWokenByReleaseReplyAfterSlowSend: a waiter of the releasing Engine
// (hand-over in memory off), woken from the release's reply, gets the lock
// when the release reached Redis late (its client stalled for 85% of the
// claim window before sending it): the script granted the lock to the
// waiter a moment ago, until claimed, and the waiter can claim it. It does
// not fail with ErrUnavailable after waiting its turn.
func TestWokenByReleaseReplyAfterSlowSend(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		const window = time.Second // claimed within 600 ms
		hook := &slowSendHook{slow: window * 3 / 5 * 85 / 100}
		rdb := redis.NewClient(&redis.Options{Addr: b.Addr})
		rdb.AddHook(hook)
		t.Cleanup(func() { _ = rdb.Close() })
		prefix := redistest.Prefix(t)
		l := lockerOn(t, rdb, prefix, Options{ClaimWindow: window, LocalHandOvers: -1})
		k := mustKey(t, "slow-release")
		q := l.redisKeys(k)[1]
		admin := b.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		holder, err := l.Acquire(ctx, k, lifecycle.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			ls  *lifecycle.Lease
			err error
		}
		got := make(chan result, 1)
		go func() {
			ls, err := l.Acquire(ctx, k, lifecycle.Policy{Wait: 5 * time.Second})
			got <- result{ls, err}
		}()
		eventually(t, 5*time.Second, "the waiter queued", func() bool {
			return admin.ZCard(ctx, q).Val() == 1
		})
		hook.armed.Store(true)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("the waiter woken by a release sent %v late: %v, want the lock", hook.slow, r.err)
		}
		if err := r.ls.Release(context.Background()); err != nil {
			t.Fatalf("the waiter's lease: %v", err)
		}
	})
}

// takes returns a condition for eventually: that e takes key failing fast
// (and releases it), so that the key is free.
func takes(e *Engine, key lockcore.Key) func() bool {
	return func() bool {
		ls, err := e.Acquire(context.Background(), key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			return false
		}
		_ = ls.Release(context.Background())
		return true
	}
}
