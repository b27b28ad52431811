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

// TestLateGrantHeldNoLongerThanRedisKeepsIt checks the promise that a
// waiter's section never outlives its hold in Redis, however late the waiter
// learns it was granted the lock. The waiter's hand-over message is lost (its
// queue entry names a channel nobody reads), so it learns of the grant only
// when it asks Redis again, when the holder's lease would have ended; it
// then keeps the lock longer than its TTL, so the watchdog must renew what
// Redis actually holds. Another owner polling with fail-fast acquires must
// not get in while the waiter's context is live.
func TestLateGrantHeldNoLongerThanRedisKeepsIt(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	// Pub/sub and scripts work on both backends.
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		const ttl = 3 * time.Second
		holder := newLocker(t, b, prefix, Options{TTL: ttl})
		deaf := newLocker(t, b, prefix, Options{TTL: ttl})
		prober := newLocker(t, b, prefix, Options{TTL: ttl})
		rdb := b.Universal(t)
		ctx := context.Background()
		eventually(t, 5*time.Second, "deaf Engine subscribed", func() bool {
			return rdb.PubSubNumSub(ctx, deaf.channel).Val()[deaf.channel] == 1
		})
		deaf.channel = prefix + "nobody-listens" // see TestLostHandOverNotification
		key := mustKey(t, "k")
		h, err := holder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		got, errc := acquireAsync(deaf, key, 20*time.Second)
		eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, holder, key).Waiters) == 1 })
		// The waiter sleeps until the holder's lease would end. Hold a while
		// longer, so that it asks Redis before its grant's lease ends (else it
		// takes the lock afresh), but late in that lease.
		eventually(t, 2*time.Second, "holder's lease down to TTL-400ms", func() bool {
			return inspect(t, holder, key).TTL <= ttl-400*time.Millisecond
		})
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		granted := time.Now()
		w := awaitLease(t, got, errc, ttl+2*time.Second, "waiter whose hand-over was lost")
		learned := time.Since(granted)
		t.Logf("waiter learned of its grant %v after it (TTL %v)", learned, ttl)

		// Poll as another owner until the waiter's section ends, for longer
		// than a TTL: a correct engine keeps the hold all along.
		end := time.Now().Add(ttl + ttl/2)
		attempts := 0
		for ; attempts < 5000 && time.Now().Before(end) && w.Context().Err() == nil; attempts++ {
			ls, err := prober.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err == nil {
				live := w.Context().Err() == nil
				in := time.Since(granted)
				_ = ls.Release(ctx)
				if live {
					t.Errorf("another owner acquired %v after the grant (%v after the waiter learned of it) while the waiter's context was live",
						in, in-learned)
				}
				break
			}
			if !errors.Is(err, lockcore.ErrNotAcquired) {
				t.Fatal(err)
			}
			select {
			case <-w.Context().Done():
			case <-time.After(5 * time.Millisecond): // pacing of the prober
			}
		}
		if attempts < 10 {
			t.Errorf("only %d attempts by the prober", attempts)
		}
		if err := w.Context().Err(); err != nil {
			t.Logf("waiter's section ended %v after the grant: %v", time.Since(granted), context.Cause(w.Context()))
		}
		_ = w.Release(ctx)
	})
}

// TestDeadlinesKept checks the promise that the engine keeps its own
// deadlines whatever the client's timeouts: with Redis blackholed, an
// Acquire with a 500ms context deadline, failing fast or waiting, returns
// within it (+150ms) with an error matching ErrUnavailable (Redis was not
// reached; the lock was not found held), and a Release returns within
// ReleaseTimeout (+150ms) with ErrUnavailable.
func TestDeadlinesKept(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	const slack = 150 * time.Millisecond
	const releaseTimeout = 300 * time.Millisecond
	// call runs f, which must return within bound; it waits 5s at most.
	call := func(t *testing.T, what string, bound time.Duration, f func() error) error {
		t.Helper()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- f() }()
		select {
		case err := <-done:
			took := time.Since(start)
			t.Logf("%s returned after %v: %v", what, took, err)
			if took > bound {
				t.Errorf("%s took %v, want within %v", what, took, bound)
			}
			return err
		case <-time.After(5 * time.Second):
			t.Fatalf("%s had not returned after 5s, want within %v", what, bound)
			return nil
		}
	}
	for _, k := range []clientKind{defaultKind, tightKind(150 * time.Millisecond)} {
		t.Run(k.name, func(t *testing.T) {
			for _, pol := range []struct {
				name string
				p    lifecycle.Policy
			}{{"acquire-fail-fast", lifecycle.Policy{Wait: lockcore.FailFast}}, {"acquire-wait", lifecycle.Policy{Wait: 5 * time.Second}}} {
				t.Run(pol.name, func(t *testing.T) {
					// The proxy works on both backends.
					redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
						l, p := cutOffLocker(t, b, k, redistest.Prefix(t), Options{ReleaseTimeout: releaseTimeout})
						warmScripts(t, l) // a pooled connection, as in a running service
						key := mustKey(t, "k")
						p.Blackhole(true)
						const deadline = 500 * time.Millisecond
						err := call(t, "Acquire", deadline+slack, func() error {
							ctx, cancel := context.WithTimeout(context.Background(), deadline)
							defer cancel()
							ls, err := l.Acquire(ctx, key, pol.p)
							if err == nil {
								_ = ls.Release(context.Background())
							}
							return err
						})
						if !errors.Is(err, lockcore.ErrUnavailable) || errors.Is(err, lockcore.ErrNotAcquired) {
							t.Errorf("Acquire with Redis blackholed: %v; want ErrUnavailable, not ErrNotAcquired", err)
						}
					})
				})
			}
			t.Run("release", func(t *testing.T) {
				redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
					l, p := cutOffLocker(t, b, k, redistest.Prefix(t), Options{ReleaseTimeout: releaseTimeout})
					ctx := context.Background()
					ls, err := l.Acquire(ctx, mustKey(t, "k"), lifecycle.Policy{Wait: lockcore.FailFast})
					if err != nil {
						t.Fatal(err)
					}
					p.Blackhole(true)
					err = call(t, "Release", releaseTimeout+slack, func() error { return ls.Release(ctx) })
					if !errors.Is(err, lockcore.ErrUnavailable) {
						t.Errorf("Release with Redis blackholed: %v, want ErrUnavailable", err)
					}
				})
			})
		})
	}
}

// TestLossDeclaredBeforeExpiry checks the promise that a holder cut off from
// Redis has its lease's context cancelled before Redis lets another owner in,
// whatever the client's timeouts: at go-redis's defaults (ReadTimeout 3 s,
// longer than the 900ms TTL) and with a tight ReadTimeout (150ms).
func TestLossDeclaredBeforeExpiry(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	for _, k := range []clientKind{defaultKind, tightKind(150 * time.Millisecond)} {
		t.Run(k.name, func(t *testing.T) {
			// The proxy works on both backends.
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				prefix := redistest.Prefix(t)
				const ttl = 900 * time.Millisecond
				holder, p := cutOffLocker(t, b, k, prefix, Options{TTL: ttl})
				prober := newLocker(t, b, prefix, Options{TTL: ttl})
				key := mustKey(t, "k")
				ctx := context.Background()
				// Not released: cut off, it is lost, and its key expires.
				ls, err := holder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil {
					t.Fatal(err)
				}
				cancelled := make(chan time.Time, 1)
				go func() {
					<-ls.Context().Done()
					cancelled <- time.Now()
				}()
				p.Blackhole(true)
				cut := time.Now()
				var in time.Time
				for i := 0; i < 10000 && time.Since(cut) < 10*time.Second; i++ {
					pl, err := prober.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
					if err == nil {
						in = time.Now()
						_ = pl.Release(ctx)
						break
					}
					if !errors.Is(err, lockcore.ErrNotAcquired) {
						t.Fatal(err)
					}
					<-time.After(2 * time.Millisecond) // pacing of the prober
				}
				if in.IsZero() {
					t.Fatal("the prober never got in: the cut-off holder's key did not expire")
				}
				var at time.Time
				select {
				case at = <-cancelled:
				case <-time.After(5 * time.Second):
					t.Fatalf("another owner acquired %v after the cut; the holder's context was still live 5s later", in.Sub(cut))
				}
				lead := in.Sub(at)
				t.Logf("holder's context cancelled %v after the cut, another owner acquired %v after it: lead %v",
					at.Sub(cut), in.Sub(cut), lead)
				if lead <= 0 {
					t.Errorf("another owner acquired %v before the holder's context was cancelled", -lead)
				}
			})
		})
	}
}
