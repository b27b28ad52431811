package redisengine

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// tripHook counts a client's exchanges with a server: a command alone or a
// pipeline, leaving out a new connection's handshake. Added to each node's
// client of a Cluster, it counts exchanges with every node.
type tripHook struct{ n atomic.Int64 }

func (h *tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if !handshake(cmd) {
				h.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "select", "auth", "readonly":
		return true
	}
	return false
}

// countTrips adds h to c, to each node's client on a Cluster. It must run
// before c's first command.
func countTrips(c redis.UniversalClient, h *tripHook) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
		return
	}
	c.AddHook(h)
}

// sameSlot returns two keys whose locks share a Cluster slot under l's
// prefix, and two whose locks do not.
func sameSlot(t *testing.T, l *Engine) (same, apart [2]lockcore.Key) {
	a := mustKey(t, "group", "a")
	slot := slotOf(l.redisKeys(a)[0])
	same[0], apart[0] = a, a
	for i := 0; same[1] == (lockcore.Key{}) || apart[1] == (lockcore.Key{}); i++ {
		k := mustKey(t, "group", strconv.Itoa(i))
		if slotOf(l.redisKeys(k)[0]) == slot {
			same[1] = k
		} else {
			apart[1] = k
		}
	}
	return same, apart
}

// TestGroupRoundTrips: several free resources whose locks share a slot
// (any two on one server) are taken in one exchange with Redis and
// released in one, with a fence each; on a Cluster, ones in different
// slots are taken one by one, an exchange each. Counted on every
// deployment, failing fast and waiting.
func TestGroupRoundTrips(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		c := b.Universal(t)
		trips := &tripHook{}
		countTrips(c, trips)
		l, err := New(c, Options{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		other := newLocker(t, b, l.opt.Prefix, Options{})
		ctx := context.Background()
		same, apart := sameSlot(t, l)
		// Warm up: the first use reads the server's settings and loads the
		// scripts (EVALSHA, NOSCRIPT, EVAL), on every master the keys are on.
		for _, keys := range [][2]lockcore.Key{same, same, apart, apart} {
			ls, err := lockcore.AcquireAll(ctx, l, keys[:], lockcore.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			if err := lockcore.ReleaseAll(ctx, ls); err != nil {
				t.Fatal(err)
			}
		}
		_, cluster := c.(*redis.ClusterClient)
		cases := []struct {
			keys [2]lockcore.Key
			want int64 // exchanges each way
		}{{same, 1}, {apart, 1}}
		if cluster {
			cases[1].want = 2
		}
		for _, tc := range cases {
			for _, p := range []lockcore.Policy{{Wait: lockcore.FailFast}, {Wait: time.Second}} {
				for range 10 {
					trips.n.Store(0)
					ls, err := lockcore.AcquireAll(ctx, l, tc.keys[:], p)
					if err != nil {
						t.Fatal(err)
					}
					if got := trips.n.Load(); got != tc.want {
						t.Fatalf("AcquireAll(%v, %+v): %d exchanges with Redis, want %d", tc.keys, p, got, tc.want)
					}
					held := lockcore.HeldFrom(ls[1].Context())
					if len(held) != 2 || held[0].Fence <= 0 || held[1].Fence <= 0 {
						t.Fatalf("the context holds %+v, want both keys with their fences", held)
					}
					for _, k := range tc.keys {
						if _, err := other.Acquire(ctx, k, lockcore.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
							t.Fatalf("another Engine's attempt on %v while the group holds it: %v", k, err)
						}
					}
					trips.n.Store(0)
					if err := lockcore.ReleaseAll(ctx, ls); err != nil {
						t.Fatal(err)
					}
					if got := trips.n.Load(); got != tc.want {
						t.Fatalf("ReleaseAll(%v): %d exchanges with Redis, want %d", tc.keys, got, tc.want)
					}
					for _, k := range tc.keys {
						ls, err := other.Acquire(ctx, k, lockcore.Policy{Wait: lockcore.FailFast})
						if err != nil {
							t.Fatalf("%v after ReleaseAll: %v", k, err)
						}
						_ = ls.Release(ctx)
					}
				}
			}
		}
	})
}

// TestGroupRefusedWritesNothing: a group whose second key is held fails
// fast with that key's contention error and leaves the first free; one
// that may wait takes them one by one, waiting for the held key in its
// queue, and gets it when it is released.
func TestGroupRefusedWritesNothing(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		p := redistest.Prefix(t)
		l, other := newLocker(t, b, p, Options{}), newLocker(t, b, p, Options{})
		ctx := context.Background()
		a, k := mustKey(t, "a"), mustKey(t, "b")
		held, err := other.Acquire(ctx, k, lockcore.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		_, err = lockcore.AcquireAll(ctx, l, []lockcore.Key{k, a}, lockcore.Policy{Wait: lockcore.FailFast})
		var ce *lockcore.ContentionError
		if !errors.As(err, &ce) || ce.Key != k.String() || ce.TimedOut {
			t.Fatalf("AcquireAll failing fast with %v held: %v, want its ContentionError", k, err)
		}
		if ls, err := other.Acquire(ctx, a, lockcore.Policy{Wait: lockcore.FailFast}); err != nil {
			t.Fatalf("%v after the refused group: %v", a, err)
		} else {
			_ = ls.Release(ctx)
		}

		got := make(chan error, 1)
		var leases []*lockcore.Lease
		go func() {
			ls, err := lockcore.AcquireAll(ctx, l, []lockcore.Key{k, a}, lockcore.Policy{Wait: 5 * time.Second})
			leases = ls
			got <- err
		}()
		eventually(t, 5*time.Second, "the group's attempt on the held key queued", func() bool {
			n, _ := b.Client(t).ZCard(ctx, l.redisKeys(k)[1]).Result()
			return n == 1
		})
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the waiting group never got the released key")
		}
		if err := lockcore.ReleaseAll(ctx, leases); err != nil {
			t.Fatal(err)
		}
	})
}

// TestGroupLostReplyIsWithdrawn: a group acquisition whose reply is lost
// after it took every key fails with ErrUnavailable, and its keys are
// given back at once, not when their 10 s leases end.
func TestGroupLostReplyIsWithdrawn(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		var armed atomic.Bool
		rdb := b.Client(t)
		rdb.AddHook(loseReply{&armed, allScript})
		p := redistest.Prefix(t)
		l, err := New(rdb, Options{Prefix: p})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		other := newLocker(t, b, p, Options{})
		ctx := context.Background()
		keys := []lockcore.Key{mustKey(t, "a"), mustKey(t, "b")}
		warm(t, l, keys...)
		armed.Store(true)
		if _, err := lockcore.AcquireAll(ctx, l, keys, lockcore.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrUnavailable) {
			t.Fatalf("AcquireAll with its reply lost: %v, want ErrUnavailable", err)
		}
		if armed.Load() {
			t.Fatal("the group script never ran")
		}
		for _, k := range keys {
			eventually(t, 2*time.Second, k.String()+" given back", func() bool {
				ls, err := other.Acquire(ctx, k, lockcore.Policy{Wait: lockcore.FailFast})
				if err != nil {
					return false
				}
				_ = ls.Release(ctx)
				return true
			})
		}
	})
}

// TestGroupReleasedTogether: leases taken together stay held in Redis
// until the last of them is released, and are then given up together.
func TestGroupReleasedTogether(t *testing.T) {
	b := redistest.Best(t)
	p := redistest.Prefix(t)
	l, other := newLocker(t, b, p, Options{}), newLocker(t, b, p, Options{})
	ctx := context.Background()
	a, k := mustKey(t, "a"), mustKey(t, "b")
	warm(t, l, a, k)
	ls, err := lockcore.AcquireAll(ctx, l, []lockcore.Key{a, k}, lockcore.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if holdOf(l, ls[0]).grp == nil {
		t.Fatal("two free keys on one server were not taken as a group")
	}
	if err := ls[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, k, lockcore.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
		t.Fatalf("%v released before the rest of its group: %v, want still held", k, err)
	}
	if err := ls[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, key := range []lockcore.Key{a, k} {
		got, err := other.Acquire(ctx, key, lockcore.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatalf("%v after its group was released: %v", key, err)
		}
		_ = got.Release(ctx)
	}
}

// warm takes and releases keys together twice: the first time reads the
// server's settings, the second loads the group script.
func warm(t *testing.T, l *Engine, keys ...lockcore.Key) {
	t.Helper()
	for range 2 {
		ls, err := lockcore.AcquireAll(context.Background(), l, keys, lockcore.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		if err := lockcore.ReleaseAll(context.Background(), ls); err != nil {
			t.Fatal(err)
		}
	}
}
