package redisengine

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

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
// deployment, failing fast and waiting, without replica acknowledgement
// (which Sentinel has by default, and which takes keys one by one).
func TestGroupRoundTrips(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		c := b.Universal(t)
		trips := &redistest.Trips{}
		redistest.CountTrips(c, trips)
		l, err := New(c, Options{Prefix: redistest.Prefix(t), Replicas: -1})
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
			ls, err := lifecycle.AcquireAll(ctx, l.locker(), keys[:], lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			if err := lifecycle.ReleaseAll(ctx, ls); err != nil {
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
			for _, p := range []lifecycle.Policy{{Wait: lockcore.FailFast}, {Wait: time.Second}} {
				for range 10 {
					trips.Reset()
					ls, err := lifecycle.AcquireAll(ctx, l.locker(), tc.keys[:], p)
					if err != nil {
						t.Fatal(err)
					}
					if got := trips.N(); got != tc.want {
						t.Fatalf("AcquireAll(%v, %+v): %d exchanges with Redis, want %d", tc.keys, p, got, tc.want)
					}
					held := lifecycle.HeldFrom(ls[1].Context())
					if len(held) != 2 || held[0].Fence <= 0 || held[1].Fence <= 0 {
						t.Fatalf("the context holds %+v, want both keys with their fences", held)
					}
					for _, k := range tc.keys {
						if _, err := other.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
							t.Fatalf("another Engine's attempt on %v while the group holds it: %v", k, err)
						}
					}
					trips.Reset()
					if err := lifecycle.ReleaseAll(ctx, ls); err != nil {
						t.Fatal(err)
					}
					if got := trips.N(); got != tc.want {
						t.Fatalf("ReleaseAll(%v): %d exchanges with Redis, want %d", tc.keys, got, tc.want)
					}
					for _, k := range tc.keys {
						ls, err := other.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
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
		held, err := other.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		_, err = lifecycle.AcquireAll(ctx, l.locker(), []lockcore.Key{k, a}, lifecycle.Policy{Wait: lockcore.FailFast})
		var ce *lockcore.ContentionError
		if !errors.As(err, &ce) || ce.Key != k.String() || ce.TimedOut {
			t.Fatalf("AcquireAll failing fast with %v held: %v, want its ContentionError", k, err)
		}
		if ls, err := other.Acquire(ctx, a, lifecycle.Policy{Wait: lockcore.FailFast}); err != nil {
			t.Fatalf("%v after the refused group: %v", a, err)
		} else {
			_ = ls.Release(ctx)
		}

		got := make(chan error, 1)
		var leases []*lifecycle.Lease
		go func() {
			ls, err := lifecycle.AcquireAll(ctx, l.locker(), []lockcore.Key{k, a}, lifecycle.Policy{Wait: 5 * time.Second})
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
		if err := lifecycle.ReleaseAll(ctx, leases); err != nil {
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
		if _, err := lifecycle.AcquireAll(ctx, l.locker(), keys, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrUnavailable) {
			t.Fatalf("AcquireAll with its reply lost: %v, want ErrUnavailable", err)
		}
		if armed.Load() {
			t.Fatal("the group script never ran")
		}
		for _, k := range keys {
			eventually(t, 2*time.Second, k.String()+" given back", func() bool {
				ls, err := other.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil {
					return false
				}
				_ = ls.Release(ctx)
				return true
			})
		}
	})
}

// TestGroupLeasesReleasedAlone: a lease of several taken together and
// released on its own gives its key up at once, and so does one whose
// MaxHold ceiling ends it, without waiting for the others.
func TestGroupLeasesReleasedAlone(t *testing.T) {
	b := redistest.Best(t)
	p := redistest.Prefix(t)
	l, other := newLocker(t, b, p, Options{}), newLocker(t, b, p, Options{})
	ctx := context.Background()
	a, k := mustKey(t, "a"), mustKey(t, "b")
	warm(t, l, a, k)
	trips := &redistest.Trips{}
	l.run.rdb.AddHook(trips)
	ls, err := lifecycle.AcquireAll(ctx, l.locker(), []lockcore.Key{a, k}, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if n := trips.N(); n != 1 {
		t.Fatalf("two free keys on one server taken in %d exchanges, want 1 (together)", n)
	}
	if err := ls[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := other.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatalf("%v released on its own, before the rest of its group: %v, want it free", k, err)
	}
	_ = got.Release(ctx)
	if _, err := other.Acquire(ctx, a, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
		t.Fatalf("%v, still held: %v", a, err)
	}
	if err := ls[0].Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A ceiling ends each hold and gives its key up; nobody released them.
	const ceiling = 200 * time.Millisecond
	ls, err = lifecycle.AcquireAll(ctx, l.locker(), []lockcore.Key{a, k}, lifecycle.Policy{Wait: lockcore.FailFast, MaxHold: ceiling})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, key := range []lockcore.Key{a, k} {
		eventually(t, 2*time.Second, key.String()+" given up at its ceiling", func() bool {
			got, err := other.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				return false
			}
			_ = got.Release(ctx)
			return true
		})
	}
	if took := time.Since(start); took < ceiling {
		t.Fatalf("keys free %v after they were taken, before their ceiling of %v", took, ceiling)
	}
	_ = lifecycle.ReleaseAll(ctx, ls)
}

// warm takes and releases keys together twice: the first time reads the
// server's settings, the second loads the group script.
func warm(t *testing.T, l *Engine, keys ...lockcore.Key) {
	t.Helper()
	for range 2 {
		ls, err := lifecycle.AcquireAll(context.Background(), l.locker(), keys, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		if err := lifecycle.ReleaseAll(context.Background(), ls); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGroupResentAfterLostReply: go-redis at its defaults sends the group
// script again when its reply is lost; the second run finds the holds the
// first took and answers their fences, so the group is held (not refused by
// its own holds, which would stay locked for a TTL), and released at once.
func TestGroupResentAfterLostReply(t *testing.T) {
	b := redistest.Best(t)
	if !b.Real() {
		b = redistest.Mini(t)
	}
	p := redistest.Prefix(t)
	l, proxy := cutOffLocker(t, b, defaultKind, p, Options{})
	other := newLocker(t, b, p, Options{})
	ctx := context.Background()
	keys := []lockcore.Key{mustKey(t, "a"), mustKey(t, "b")}
	warm(t, l, keys...)
	for _, policy := range []lifecycle.Policy{{Wait: lockcore.FailFast}, {Wait: time.Second}} {
		lost := proxy.LostReplies()
		proxy.LoseReplyTo([]byte(l.run.sha(allScript)), 1)
		ls, err := lifecycle.AcquireAll(ctx, l.locker(), keys, policy)
		if err != nil {
			t.Fatalf("AcquireAll (%+v) whose first reply was lost: %v", policy, err)
		}
		if proxy.LostReplies() != lost+1 {
			t.Fatal("no reply of the group script was lost")
		}
		held := lifecycle.HeldFrom(ls[1].Context())
		if len(held) != 2 || held[0].Fence <= 0 || held[1].Fence <= 0 {
			t.Fatalf("the context holds %+v, want both keys with their fences", held)
		}
		if err := lifecycle.ReleaseAll(ctx, ls); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			got, err := other.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatalf("%v after ReleaseAll: %v", k, err)
			}
			_ = got.Release(ctx)
		}
	}
}
