package redisengine

// The engine's safety promises under the faults a real client meets: a
// command that ran but whose reply was lost (and that go-redis, at its
// default MaxRetries, sends again), Redis stalled past the client's read
// timeout, a waiter's process killed, a network cut, and clients other than
// a plain *redis.Client. Clients are at go-redis's defaults (MaxRetries 3,
// ReadTimeout 3 s, ContextTimeoutEnabled false) unless a case says otherwise.
//
// A holder's section is live while its lease's Context is not done; an
// overlap is another owner acquiring while that context is still live.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// testClaimWindow is how long a waiter granted the lock has to claim it before
// the grant may go to the next waiter: the default the engine promises.
// testClaimSlack is what a test allows on top for the next waiter to be woken
// and take it.
const (
	testClaimWindow = time.Second
	testClaimSlack  = 500 * time.Millisecond
)

// scriptSHA returns the SHA1 that l's EVALSHA of its acquire or release
// script carries on the wire, for faultproxy.LoseReplyTo. It is the one
// place that knows the engine's names for its scripts.
func scriptSHA(t testing.TB, l *Engine, which string) []byte {
	t.Helper()
	var s *script
	switch which {
	case "acquire":
		s = acquireScript
	case "release":
		s = releaseScript
	default:
		t.Fatalf("scriptSHA(%q): no such script", which)
	}
	sha := l.run.sha(s)
	if len(sha) != 40 {
		t.Fatalf("scriptSHA(%q): %q is not a hex SHA1", which, sha)
	}
	return []byte(sha)
}

// clientKind is a configuration of the go-redis client under test.
type clientKind struct {
	name string
	opt  func(addr string) *redis.Options
}

// defaultKind is go-redis at its defaults: MaxRetries 3, ReadTimeout 3 s,
// ContextTimeoutEnabled false.
var defaultKind = clientKind{"default", func(addr string) *redis.Options {
	return &redis.Options{Addr: addr}
}}

// tightKind is go-redis with a short ReadTimeout and its other defaults
// (MaxRetries 3).
func tightKind(rt time.Duration) clientKind {
	return clientKind{"tight", func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, ReadTimeout: rt}
	}}
}

func (k clientKind) client(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(k.opt(addr))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lockerOn returns an Engine on rdb with prefix, closed at the end of the
// test.
func lockerOn(t *testing.T, rdb redis.UniversalClient, prefix string, opt Options) *Engine {
	t.Helper()
	opt.Prefix = prefix
	l, err := New(rdb, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// cutOffLocker returns an Engine whose client (of kind k) reaches b through a
// fault proxy, and the proxy. The proxy closes before the Engine does, so
// that closing does not wait out reads that a blackhole left hanging.
func cutOffLocker(t *testing.T, b *redistest.Backend, k clientKind, prefix string, opt Options) (*Engine, *faultproxy.Proxy) {
	t.Helper()
	p := faultproxy.Start(t, b.Addr)
	l := lockerOn(t, k.client(t, p.Addr), prefix, opt)
	t.Cleanup(p.Close)
	return l, p
}

// warmScripts makes Redis know the engine's scripts, by taking and releasing
// a scratch key through l: an EVALSHA of an unknown script is answered
// NOSCRIPT and run again as EVAL, which LoseReplyTo on the SHA would not
// match.
func warmScripts(t *testing.T, l *Engine) {
	t.Helper()
	ctx := context.Background()
	ls, err := l.Acquire(ctx, mustKey(t, "warm-up"), lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// checkSoleHolder checks that outer's hold is the key's only one, with count
// 1, that another owner cannot take it, and that outer's section is live.
func checkSoleHolder(t *testing.T, l, intruder *Engine, key lockcore.Key, outer *lifecycle.Lease) {
	t.Helper()
	ctx := context.Background()
	if info := inspect(t, l, key); len(info.Holders) != 1 || holdCount(info, outer.Token()) != 1 {
		t.Errorf("Redis: %+v; want the outer holder's token alone with count 1", info)
	}
	if ls, err := intruder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}); err == nil {
		_ = ls.Release(ctx)
		t.Errorf("another owner acquired the key while the outer lease's context is live (%v)", outer.Context().Err())
	} else if !errors.Is(err, lockcore.ErrNotAcquired) {
		t.Errorf("another owner: %v, want ErrNotAcquired", err)
	}
	if err := outer.Context().Err(); err != nil {
		t.Errorf("outer lease's context ended: %v", context.Cause(outer.Context()))
	}
}

// fillPool leaves n idle connections in rdb's pool.
func fillPool(t *testing.T, rdb *redis.Client, n int) {
	t.Helper()
	ctx := context.Background()
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = rdb.Conn()
		if err := conns[i].Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		_ = c.Close()
	}
	if idle := rdb.PoolStats().IdleConns; idle < uint32(n) {
		t.Fatalf("%d idle connections pooled, want %d", idle, n)
	}
}

// stallRedis makes admin run DEBUG SLEEP d and returns once the server is
// stalled (a probe's PING goes unanswered), with a channel that gets the
// DEBUG command's result when the server wakes.
func stallRedis(t *testing.T, addr string, d time.Duration) <-chan error {
	t.Helper()
	admin := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: d + 5*time.Second})
	probe := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 20 * time.Millisecond})
	t.Cleanup(func() { _ = admin.Close(); _ = probe.Close() })
	ctx := context.Background()
	if err := probe.Ping(ctx).Err(); err != nil { // dialled before the stall
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() { woke <- admin.Do(ctx, "DEBUG", "SLEEP", d.Seconds()).Err() }()
	eventually(t, d/2, "Redis stalled by DEBUG SLEEP", func() bool { return probe.Ping(ctx).Err() != nil })
	return woke
}

// reenter takes key on a, then re-enters it on bl under the same token,
// and checks that Redis counts two entries. The outer lease is released
// when the test ends.
func reenter(t *testing.T, a, bl *Engine, key lockcore.Key) (outer, inner *lifecycle.Lease) {
	t.Helper()
	ctx := context.Background()
	outer, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = outer.Release(ctx) })
	inner, err = bl.Acquire(enginetest.WithToken(ctx, outer.Token()), key, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if n := holdCount(inspect(t, a, key), outer.Token()); n != 2 {
		t.Fatalf("re-entered count %d, want 2", n)
	}
	return outer, inner
}

// TestRetriedReleaseIsIdempotent checks the promise that a release takes
// effect once however often the client sends it: a re-entered hold
// released by its inner lease keeps the outer holder's count when the
// release's reply is lost and go-redis retries it, or when Redis stalls past
// the client's ReadTimeout so the retries queue up behind the first; and a
// release that handed the lock to a waiter of the same Engine wakes that
// waiter even though its reply was lost and the retry found the lock gone.
// Hand-over in memory is off: these are releases through Redis.
func TestRetriedReleaseIsIdempotent(t *testing.T) {
	t.Run("reentered-lost-reply", func(t *testing.T) {
		// The proxy works on both backends.
		redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
			prefix := redistest.Prefix(t)
			a := newLocker(t, b, prefix, Options{LocalHandOvers: -1})
			third := newLocker(t, b, prefix, Options{LocalHandOvers: -1})
			bl, p := cutOffLocker(t, b, defaultKind, prefix, Options{LocalHandOvers: -1})
			warmScripts(t, bl)
			key := mustKey(t, "k")
			ctx := context.Background()
			outer, inner := reenter(t, a, bl, key)
			p.LoseReplyTo(scriptSHA(t, bl, "release"), 1)
			err := inner.Release(ctx)
			if p.LostReplies() != 1 {
				t.Fatalf("the release's reply was not lost (%d lost): the fault did not happen", p.LostReplies())
			}
			t.Logf("inner release, its reply lost and the call retried by go-redis: %v", err)
			checkSoleHolder(t, a, third, key, outer)
		})
	})

	t.Run("reentered-stall", func(t *testing.T) {
		// DEBUG SLEEP needs a real redis-server; miniredis cannot stall.
		for _, b := range redistest.DebugBackends(t) {
			t.Run(b.Name, func(t *testing.T) {
				prefix := redistest.Prefix(t)
				a := newLocker(t, b, prefix, Options{LocalHandOvers: -1})
				third := newLocker(t, b, prefix, Options{LocalHandOvers: -1})
				rdb := tightKind(200*time.Millisecond).client(t, b.Addr)
				bl := lockerOn(t, rdb, prefix, Options{LocalHandOvers: -1})
				warmScripts(t, bl)
				// A busy client has connections pooled: each retry goes out
				// on one at once, where a new one would first say HELLO.
				fillPool(t, rdb, 4)
				key := mustKey(t, "k")
				ctx := context.Background()
				outer, inner := reenter(t, a, bl, key)
				woke := stallRedis(t, b.Addr, 500*time.Millisecond)
				start := time.Now()
				err := inner.Release(ctx)
				t.Logf("inner release sent into a 500ms stall (ReadTimeout 200ms): %v after %v", err, time.Since(start))
				select {
				case err := <-woke:
					if err != nil {
						t.Fatalf("DEBUG SLEEP: %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Redis did not wake from DEBUG SLEEP 0.5 in 5s")
				}
				checkSoleHolder(t, a, third, key, outer)
			})
		}
	})

	t.Run("handover-lost-reply", func(t *testing.T) {
		// The proxy works on both backends.
		redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
			prefix := redistest.Prefix(t)
			l, p := cutOffLocker(t, b, defaultKind, prefix, Options{LocalHandOvers: -1})
			warmScripts(t, l)
			key := mustKey(t, "k")
			ctx := context.Background()
			const ttl = 5 * time.Second // a waiter not woken sleeps this long
			h, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			got, errc := acquireAsync(l, key, 20*time.Second)
			eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, l, key).Waiters) == 1 })
			p.LoseReplyTo(scriptSHA(t, l, "release"), 1)
			err = h.Release(ctx)
			released := time.Now()
			if p.LostReplies() != 1 {
				t.Fatalf("the release's reply was not lost (%d lost): the fault did not happen", p.LostReplies())
			}
			t.Logf("release handing over to a waiter of the same Engine, reply lost and retried: %v", err)
			var w *lifecycle.Lease
			select {
			case w = <-got:
			case err := <-errc:
				t.Fatalf("waiter: %v", err)
			case <-time.After(ttl + 2*time.Second):
				t.Fatalf("waiter holds nothing %v after the release", ttl+2*time.Second)
			}
			took := time.Since(released)
			defer w.Release(ctx)
			t.Logf("waiter held %v after the release", took)
			if took > time.Second {
				t.Errorf("waiter held %v after the release, want within 1s", took)
			}
			if info := inspect(t, l, key); holdCount(info, w.Token()) != 1 || info.Fence != w.Fence() {
				t.Errorf("waiter holds fence %d; Redis: %+v", w.Fence(), info)
			}
		})
	})
}

// TestReleaseOfLostLeaseSparesNewerHold checks the promise that releasing a
// lease that was already lost changes nothing in Redis: not even a newer
// hold of the same owner token, taken afresh after the loss.
func TestReleaseOfLostLeaseSparesNewerHold(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		l1 := newLocker(t, b, prefix, Options{})
		l2 := newLocker(t, b, prefix, Options{})
		third := newLocker(t, b, prefix, Options{})
		key := mustKey(t, "k")
		ctx := context.Background()
		const ttl = 300 * time.Millisecond
		a, err := l1.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Universal(t).Del(ctx, l1.redisKeys(key)[0]).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-a.Context().Done():
		case <-time.After(ttl + time.Second):
			t.Fatal("the deleted lease was not declared lost")
		}
		newer, err := l2.Acquire(enginetest.WithToken(ctx, a.Token()), key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer newer.Release(ctx)
		if newer.Token() == a.Token() {
			t.Error("the token of an expired hold took the free lock; want a fresh token")
		}
		if err := a.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
			t.Errorf("release of the lost lease: %v, want ErrLockLost", err)
		}
		info := inspect(t, l1, key)
		if len(info.Holders) != 1 || holdCount(info, newer.Token()) != 1 || info.Fence != newer.Fence() {
			t.Errorf("Redis after the lost lease's release: %+v; want the newer hold (fence %d, count 1)", info, newer.Fence())
		}
		if ls, err := third.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}); err == nil {
			_ = ls.Release(ctx)
			t.Errorf("another owner acquired the key while the newer lease's context is live (%v)", newer.Context().Err())
		} else if !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Errorf("another owner: %v, want ErrNotAcquired", err)
		}
		if err := newer.Context().Err(); err != nil {
			t.Errorf("newer lease's context ended: %v", context.Cause(newer.Context()))
		}
	})
}

// TestRetriedReentryLeaksNoCount checks the promise that a re-entrant
// acquire counts once in Redis however the client handles a lost reply:
// retried by go-redis (default MaxRetries), it re-enters once; failed
// (MaxRetries -1), its withdrawal undoes it. Once every lease that succeeded
// is released the key is free at once and a waiter gets it without waiting
// out a TTL.
func TestRetriedReentryLeaksNoCount(t *testing.T) {
	kinds := []clientKind{
		defaultKind,
		{"no-retries", func(addr string) *redis.Options { return &redis.Options{Addr: addr, MaxRetries: -1} }},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			// The proxy works on both backends.
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				prefix := redistest.Prefix(t)
				a := newLocker(t, b, prefix, Options{})
				c := newLocker(t, b, prefix, Options{})
				bl, p := cutOffLocker(t, b, k, prefix, Options{})
				warmScripts(t, bl)
				key := mustKey(t, "k")
				ctx := context.Background()
				const ttl = 5 * time.Second
				outer, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
				if err != nil {
					t.Fatal(err)
				}
				p.LoseReplyTo(scriptSHA(t, bl, "acquire"), 1)
				inner, err := bl.Acquire(enginetest.WithToken(ctx, outer.Token()), key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
				if p.LostReplies() != 1 {
					t.Fatalf("the re-entry's reply was not lost (%d lost): the fault did not happen", p.LostReplies())
				}
				t.Logf("re-entry with its reply lost: %v", err)
				if err == nil {
					if err := inner.Release(ctx); err != nil {
						t.Errorf("inner release: %v", err)
					}
				} else if k.name == defaultKind.name {
					t.Errorf("re-entry retried by go-redis: %v", err)
				}
				_ = bl.Close() // waits for the withdrawal of a failed attempt
				if info := inspect(t, a, key); holdCount(info, outer.Token()) != 1 {
					t.Errorf("with only the outer lease left: %+v, want the token with count 1", info)
				}
				if err := outer.Release(ctx); err != nil {
					t.Errorf("outer release: %v", err)
				}
				if info := inspect(t, a, key); len(info.Holders) > 0 {
					t.Errorf("after every lease was released: %+v, want free", info)
				}
				start := time.Now()
				ls, err := c.Acquire(ctx, key, lifecycle.Policy{Wait: time.Second})
				if err != nil {
					t.Errorf("another owner, waiting up to 1s (TTL %v): %v after %v", ttl, err, time.Since(start))
					return
				}
				_ = ls.Release(ctx)
			})
		})
	}
}

// childWaitMain is the child of TestKilledWaiterGrantReclaimed: it waits for
// the lock with a TTL of ROUTELOCK_CHILD_TTL, saying "waiting" first, and
// "held <fence>" if it gets it.
func childWaitMain() int {
	addr, prefix, key := os.Getenv("ROUTELOCK_CHILD_ADDR"), os.Getenv("ROUTELOCK_CHILD_PREFIX"), os.Getenv("ROUTELOCK_CHILD_KEY")
	ttl, _ := time.ParseDuration(os.Getenv("ROUTELOCK_CHILD_TTL"))
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	l, err := New(rdb, Options{Prefix: prefix, TTL: ttl})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer l.Close()
	fmt.Println("waiting")
	ctx := context.Background()
	ls, err := l.Acquire(ctx, childKey(key), lifecycle.Policy{Wait: 30 * time.Second})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("held", ls.Fence())
	_ = ls.Release(ctx)
	return 0
}

// startChildMode runs the test binary again as a child in mode (see
// childMain) with env added, reading its stdout by lines; the child is
// killed at the end of the test.
func startChildMode(t *testing.T, mode string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "ROUTELOCK_CHILD="+mode), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
}

// TestKilledWaiterGrantReclaimed checks the promise that a waiter whose
// process died (SIGKILL: it never withdraws) holds up the lock for at most
// the claim window: a live waiter queued behind it holds within testClaimWindow
// (+testClaimSlack) of the holder's release, not after the dead waiter's TTL.
func TestKilledWaiterGrantReclaimed(t *testing.T) {
	// A child process reaches miniredis as well as a real server.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		holder := newLocker(t, b, prefix, Options{})
		live := newLocker(t, b, prefix, Options{})
		key := mustKey(t, "k")
		ctx := context.Background()
		// Waiters sleep until the holder's lease would end unless handed the
		// lock: a short one bounds how long the live waiter sleeps.
		const childTTL = 3 * time.Second
		h, err := holder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: childTTL})
		if err != nil {
			t.Fatal(err)
		}
		c := startChildMode(t, "wait", "ROUTELOCK_CHILD_ADDR="+b.Addr, "ROUTELOCK_CHILD_PREFIX="+prefix,
			"ROUTELOCK_CHILD_KEY="+key.String(), "ROUTELOCK_CHILD_TTL="+childTTL.String())
		if line := c.line(t); line != "waiting" {
			t.Fatalf("child: %q", line)
		}
		eventually(t, 5*time.Second, "the child queues", func() bool { return len(inspect(t, holder, key).Waiters) == 1 })
		if err := c.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = c.cmd.Wait()
		got, errc := acquireAsync(live, key, 20*time.Second)
		eventually(t, 5*time.Second, "the live waiter queues behind the dead one", func() bool { return len(inspect(t, holder, key).Waiters) == 2 })
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		w := awaitLease(t, got, errc, childTTL+5*time.Second, "live waiter behind a killed one")
		took := time.Since(released)
		defer w.Release(ctx)
		t.Logf("live waiter held %v after the release (claim window %v, dead waiter's TTL %v)", took, testClaimWindow, childTTL)
		if took > testClaimWindow+testClaimSlack {
			t.Errorf("live waiter held %v after the release, want within the claim window %v (+%v)", took, testClaimWindow, testClaimSlack)
		}
	})
}

// TestExpiredWaitersDoNotStrandLock checks the promise that a release hands
// the lock to the oldest live waiter however many expired entries (waiters
// that gave up and whose withdrawal never reached Redis) are queued ahead of
// it: with 100 of them at the head of the queue the live waiter holds within
// 1s of the release.
func TestExpiredWaitersDoNotStrandLock(t *testing.T) {
	// The queue is written directly; works on both backends.
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		holder := newLocker(t, b, prefix, Options{})
		waiter := newLocker(t, b, prefix, Options{})
		rdb := b.Universal(t)
		key := mustKey(t, "k")
		ctx := context.Background()
		const ttl = 5 * time.Second // a waiter not handed the lock sleeps this long
		h, err := holder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		got, errc := acquireAsync(waiter, key, 20*time.Second)
		eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, holder, key).Waiters) == 1 })
		q := holder.redisKeys(key)[1]
		zs, err := rdb.ZRangeWithScores(ctx, q, 0, -1).Result()
		if err != nil || len(zs) != 1 {
			t.Fatalf("queue %v %v", zs, err)
		}
		// Entries as the acquire script writes them, "<deadline ms> <ttl ms>
		// <channel> <attempt id> <token>" scored by arrival in µs, with
		// deadlines passed and arrivals before the live waiter's.
		const dead = 100
		past := time.Now().Add(-time.Minute).UnixMilli()
		entries := make([]redis.Z, dead)
		for i := range entries {
			entries[i] = redis.Z{
				Score:  zs[0].Score - float64(dead-i),
				Member: fmt.Sprintf("%d %d %snotify:gone gone.%d %s", past, ttl.Milliseconds(), prefix, i, lifecycle.NewToken()),
			}
		}
		if err := rdb.ZAdd(ctx, q, entries...).Err(); err != nil {
			t.Fatal(err)
		}
		if n := len(inspect(t, holder, key).Waiters); n != dead+1 {
			t.Fatalf("%d queued, want %d", n, dead+1)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		w := awaitLease(t, got, errc, ttl+3*time.Second, "live waiter behind expired entries")
		took := time.Since(released)
		defer w.Release(ctx)
		t.Logf("live waiter held %v after the release", took)
		if took > time.Second {
			t.Errorf("live waiter held %v after the release, behind %d expired entries; want within 1s", took, dead)
		}
	})
}

// childRingMain is the child of TestEveryUniversalClientWorksOrIsRefused: it
// makes an Engine on a *redis.Ring of one shard and says "refused <error>",
// or "accepted" and then how an acquire and release went.
func childRingMain() int {
	addr, prefix := os.Getenv("ROUTELOCK_CHILD_ADDR"), os.Getenv("ROUTELOCK_CHILD_PREFIX")
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}})
	defer ring.Close()
	l, err := New(ring, Options{Prefix: prefix})
	if err != nil {
		fmt.Println("refused", err)
		return 0
	}
	defer l.Close()
	fmt.Println("accepted")
	ctx := context.Background()
	ls, err := l.Acquire(ctx, childKey("ring"), lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		fmt.Println("acquire:", err)
		return 0
	}
	fmt.Println("acquire: ok; release:", ls.Release(ctx))
	return 0
}

// TestEveryUniversalClientWorksOrIsRefused checks the promise that New
// accepts only the clients the engine works on: a *redis.Ring (which cannot
// subscribe without naming a channel, and would subscribe on the channel's
// shard while the scripts publish hand-overs on the lock's) is refused with
// an error at construction, and does not crash the process later; a
// *redis.ClusterClient acquires, hands over to a waiter of another Engine,
// and releases.
func TestEveryUniversalClientWorksOrIsRefused(t *testing.T) {
	t.Run("ring", func(t *testing.T) {
		// A panic in a background goroutine cannot be recovered: the Ring is
		// tried in a child process, which reports. Works on both backends.
		redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "ROUTELOCK_CHILD=ring", "ROUTELOCK_CHILD_ADDR="+b.Addr,
				"ROUTELOCK_CHILD_PREFIX="+redistest.Prefix(t))
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var err error
			select {
			case err = <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("child with a Ring still running after 10s; said %q", out.String())
			}
			said := strings.TrimSpace(out.String())
			if err != nil {
				var panicked string
				for _, l := range strings.Split(errOut.String(), "\n") {
					if strings.HasPrefix(l, "panic:") {
						panicked = l
						break
					}
				}
				t.Errorf("the process with an Engine on a Ring died (%v): %q; it had said %q", err, panicked, said)
			}
			if !strings.HasPrefix(said, "refused ") {
				t.Errorf("New with a *redis.Ring: child said %q, want an error from New", said)
			}
		})
	})

	t.Run("cluster", func(t *testing.T) {
		// A one-node cluster: miniredis, and a real redis-server in cluster
		// mode when one is on PATH.
		for _, b := range redistest.ClusterBackends(t) {
			t.Run(b.Name, func(t *testing.T) {
				prefix := redistest.Prefix(t)
				cluster := func() *redis.ClusterClient {
					c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{b.Addr}})
					t.Cleanup(func() { _ = c.Close() })
					return c
				}
				l1 := lockerOn(t, cluster(), prefix, Options{})
				l2 := lockerOn(t, cluster(), prefix, Options{})
				key := mustKey(t, "k")
				ctx := context.Background()
				h, err := l1.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil {
					t.Fatalf("acquire on a ClusterClient: %v", err)
				}
				got, errc := acquireAsync(l2, key, 10*time.Second)
				eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, l1, key).Waiters) == 1 })
				if err := h.Release(ctx); err != nil {
					t.Fatalf("release on a ClusterClient: %v", err)
				}
				w := awaitLease(t, got, errc, 3*time.Second, "waiter on a ClusterClient, handed over")
				if info := inspect(t, l1, key); holdCount(info, w.Token()) != 1 || info.Fence != w.Fence() {
					t.Errorf("waiter holds fence %d; Redis: %+v", w.Fence(), info)
				}
				if err := w.Release(ctx); err != nil {
					t.Fatalf("waiter's release: %v", err)
				}
				if info := inspect(t, l1, key); len(info.Holders) > 0 {
					t.Errorf("held after every release: %+v", info)
				}
			})
		}
	})
}
