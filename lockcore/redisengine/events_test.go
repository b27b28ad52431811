package redisengine

// Options.Events: what the engine tells it, checked by a recorder.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// recorder is a lockcore.Events that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	waiting  map[string]int // key → current sum of Waiting deltas
	peak     int            // the highest sum of any key
	negative []string       // keys whose sum went below 0
	woken    map[string]int
	renewed  []renewal
	ended    []ending
}

type renewal struct {
	key string
	err error
}

type ending struct {
	ctx           context.Context
	key           string
	held, release time.Duration
	cause, err    error
}

func newRecorder() *recorder {
	return &recorder{waiting: map[string]int{}, woken: map[string]int{}}
}

func (r *recorder) Waiting(key lockcore.Key, delta int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if delta != 1 && delta != -1 {
		r.negative = append(r.negative, fmt.Sprintf("%s: delta %d", key, delta))
	}
	n := r.waiting[key.String()] + delta
	r.waiting[key.String()] = n
	r.peak = max(r.peak, n)
	if n < 0 {
		r.negative = append(r.negative, key.String())
	}
}

func (r *recorder) Woken(_ lockcore.Key, by string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.woken[by]++
}

func (r *recorder) Renewed(key lockcore.Key, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renewed = append(r.renewed, renewal{key.String(), err})
}

func (r *recorder) Ended(ctx context.Context, key lockcore.Key, held, release time.Duration, cause, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = append(r.ended, ending{ctx, key.String(), held, release, cause, err})
}

// wokenBy returns how many wakes by w were told.
func (r *recorder) wokenBy(w string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.woken[w]
}

// endings returns the endings told of key.
func (r *recorder) endings(key string) []ending {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ending
	for _, e := range r.ended {
		if e.key == key {
			out = append(out, e)
		}
	}
	return out
}

// renewals returns how many renewals of key were told with an outcome
// that match says yes to.
func (r *recorder) renewals(key string, match func(error) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, x := range r.renewed {
		if x.key == key && match(x.err) {
			n++
		}
	}
	return n
}

// balanced fails the test unless every key's Waiting sum is back at 0 and
// none ever went below it.
func (r *recorder) balanced(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.negative) > 0 {
		t.Errorf("Waiting went below 0 or had an odd delta: %v", r.negative)
	}
	for k, n := range r.waiting {
		if n != 0 {
			t.Errorf("Waiting sum of %s is %d once every acquisition returned, want 0", k, n)
		}
	}
}

func isNil(err error) bool { return err == nil }

func matches(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

type ctxKey struct{}

// TestEventsUnderContention: 16 goroutines over 4 Engines take 2 keys 12
// times each, with waits that are granted, that run out, and whose
// context ends. Once all have returned: every key's Waiting sum is 0 and
// never went below; Ended was told once per fresh hold, after its release,
// with cause ErrReleased, a nil err, the release's context, and durations;
// waiters were woken both by messages (hand-overs between Engines) and by
// replies (hand-overs within one).
func TestEventsUnderContention(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		rec := newRecorder()
		var engines []*Engine
		for range 4 {
			engines = append(engines, newLocker(t, b, prefix, Options{TTL: 2 * time.Second, Events: rec}))
		}
		keys := []lockcore.Key{mustKey(t, "contended", "a"), mustKey(t, "contended", "b")}
		rdb := b.Universal(t)
		const workers, rounds = 16, 12
		var grants, refused atomic.Int64
		// Both ways of waking show in one batch but for a slow run: under
		// the race detector on miniredis a batch has 2 to 12 wake-ups by
		// reply, and a loaded machine once had none in 4 batches; at most
		// 12 batches (a second each at the most).
		for batch := 0; batch < 12 && (batch == 0 || rec.wokenBy(wokenByMessage) == 0 || rec.wokenBy(wokenByReply) == 0); batch++ {
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for g := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := engines[g%len(engines)]
					for i := range rounds {
						key := keys[(g+i)%len(keys)]
						ctx := context.Background()
						p := lifecycle.Policy{Wait: 10 * time.Second}
						var cancel context.CancelFunc = func() {}
						switch i % 4 {
						case 2:
							p.Wait = 2 * time.Millisecond // often runs out
						case 3:
							ctx, cancel = context.WithTimeout(ctx, 3*time.Millisecond) // often ends the wait
						}
						ls, err := l.Acquire(ctx, key, p)
						cancel()
						if err != nil {
							// A context that ends before Redis answered says
							// ErrUnavailable.
							if !errors.Is(err, lockcore.ErrNotAcquired) && (i%4 != 3 || !errors.Is(err, lockcore.ErrUnavailable)) {
								errs <- err
								return
							}
							refused.Add(1)
							continue
						}
						grants.Add(1)
						// The section's work: a round trip to Redis.
						_ = rdb.Get(context.Background(), "work").Err()
						if err := ls.Release(context.WithValue(context.Background(), ctxKey{}, g)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		}
		t.Logf("%d grants, %d refused; peak wait %d; woken by message %d, reply %d, timer %d",
			grants.Load(), refused.Load(), rec.peak, rec.wokenBy(wokenByMessage), rec.wokenBy(wokenByReply), rec.wokenBy(wokenByTimer))
		rec.balanced(t)
		if rec.peak < 1 {
			t.Error("no acquisition ever waited: the test did not contend")
		}
		var ended []ending
		for _, k := range keys {
			ended = append(ended, rec.endings(k.String())...)
		}
		if int64(len(ended)) != grants.Load() {
			t.Errorf("Ended told %d times for %d fresh holds", len(ended), grants.Load())
		}
		for _, e := range ended {
			if e.cause != lockcore.ErrReleased || e.err != nil || e.held <= 0 || e.release <= 0 || e.ctx.Value(ctxKey{}) == nil {
				t.Fatalf("ending %+v; want cause ErrReleased, no error, durations, the release's context", e)
			}
		}
		if rec.wokenBy(wokenByMessage) == 0 || rec.wokenBy(wokenByReply) == 0 {
			t.Error("want waiters woken by message (between Engines) and by reply (within one)")
		}
	})
}

// TestEventsWake: a waiter on another Engine is woken by the hand-over's
// message, one on the holder's Engine by the release's reply, and one
// whose holder keeps the lock by its own timer (every 3/10 of the claim
// window); each wait is told +1 and then -1.
// Hand-over in memory is off: these are the wake-ups of a hand-over
// through Redis.
func TestEventsWake(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		ctx := context.Background()
		for _, c := range []struct {
			name string
			same bool // the waiter is on the holder's Engine
			hold bool // the holder keeps the lock until the waiter's timer woke it
			want string
		}{
			{"message", false, false, wokenByMessage},
			{"reply", true, false, wokenByReply},
			{"timer", false, true, wokenByTimer},
		} {
			t.Run(c.name, func(t *testing.T) {
				holderRec, waiterRec := newRecorder(), newRecorder()
				holderEng := newLocker(t, b, prefix, Options{Events: holderRec, LocalHandOvers: -1})
				waiterEng := newLocker(t, b, prefix, Options{Events: waiterRec, LocalHandOvers: -1})
				if c.same {
					waiterEng, waiterRec = holderEng, holderRec
				}
				// A subscription coming up wakes the Engine's waiters (by
				// reply): have it up first.
				for _, l := range []*Engine{holderEng, waiterEng} {
					if err := l.Check(ctx); err != nil {
						t.Fatal(err)
					}
				}
				key := mustKey(t, "wake", c.name)
				primeShard(t, waiterEng, key)
				ls, err := holderEng.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil {
					t.Fatal(err)
				}
				got, errc := acquireAsync(waiterEng, key, 10*time.Second)
				eventually(t, 5*time.Second, "waiter queued and told", func() bool {
					waiterRec.mu.Lock()
					defer waiterRec.mu.Unlock()
					return waiterRec.waiting[key.String()] == 1
				})
				if c.hold {
					eventually(t, 5*time.Second, "woken by its timer", func() bool { return waiterRec.wokenBy(wokenByTimer) > 0 })
				} else if n := waiterRec.wokenBy(c.want); n != 0 {
					t.Fatalf("woken by %v %d times before the release", c.want, n)
				}
				if err := ls.Release(ctx); err != nil {
					t.Fatal(err)
				}
				w := awaitLease(t, got, errc, 5*time.Second, "the waiter")
				if err := w.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if n := waiterRec.wokenBy(c.want); n == 0 {
					waiterRec.mu.Lock()
					defer waiterRec.mu.Unlock()
					t.Fatalf("not woken by %v: %v", c.want, waiterRec.woken)
				}
				waiterRec.balanced(t)
			})
		}
	})
}

// TestEventsRenewalsAndEnds: renewals are told (nil while held, the cause
// when lost or revoked, ErrUnavailable when Redis does not answer), and
// each hold's end once: lost when its key was deleted (the lease's
// context, no release time), revoked by an operator, found revoked at its
// release, ran out while Redis did not answer.
func TestEventsRenewalsAndEnds(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		ctx := context.Background()
		const ttl = 300 * time.Millisecond
		rec := newRecorder()
		l := newLocker(t, b, prefix, Options{TTL: ttl, Events: rec})
		op := newLocker(t, b, prefix, Options{})
		rdb := b.Client(t)

		// Renewed while held; lost when deleted.
		key := mustKey(t, "ends", "deleted")
		ls, err := l.Acquire(context.WithValue(ctx, ctxKey{}, "acquire"), key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "a renewal told", func() bool { return rec.renewals(key.String(), isNil) > 0 })
		if err := rdb.Del(ctx, l.redisKeys(key)[0]).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ls.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the deleted hold was not lost")
		}
		if err := ls.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
			t.Fatalf("release of the lost lease: %v", err)
		}
		es := rec.endings(key.String())
		if len(es) != 1 {
			t.Fatalf("%d endings of a hold lost and then released, want 1", len(es))
		}
		if e := es[0]; !errors.Is(e.cause, lockcore.ErrLockLost) || errors.Is(e.cause, lockcore.ErrRevoked) || e.err != nil || e.release != 0 || e.held <= 0 {
			t.Errorf("ending of the deleted hold %+v", e)
		} else if e.ctx != ls.Context() || e.ctx.Value(ctxKey{}) != "acquire" {
			t.Errorf("the loss's context is not the lease's")
		}
		if rec.renewals(key.String(), matches(lockcore.ErrLockLost)) != 1 {
			t.Error("the renewal that found the key gone was not told")
		}

		// Revoked while held.
		key = mustKey(t, "ends", "revoked")
		ls, err = l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := op.Revoke(ctx, key, "events"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ls.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the revoked hold was not lost")
		}
		_ = ls.Release(ctx)
		if es := rec.endings(key.String()); len(es) != 1 || !errors.Is(es[0].cause, lockcore.ErrRevoked) || es[0].err != nil {
			t.Errorf("endings of the revoked hold %+v, want one, ErrRevoked", es)
		}
		if rec.renewals(key.String(), matches(lockcore.ErrRevoked)) != 1 {
			t.Error("the renewal that found the hold revoked was not told")
		}

		// Revoked, found at release.
		slow := newLocker(t, b, prefix, Options{TTL: 10 * time.Second, Events: rec})
		key = mustKey(t, "ends", "revoked-at-release")
		ls, err = slow.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := op.revoke(ctx, key, "events", false); err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); !errors.Is(err, lockcore.ErrRevoked) {
			t.Fatalf("release: %v, want ErrRevoked", err)
		}
		if es := rec.endings(key.String()); len(es) != 1 || !errors.Is(es[0].cause, lockcore.ErrRevoked) || es[0].err != nil || es[0].release <= 0 {
			t.Errorf("endings of the hold found revoked at release %+v", es)
		}

		// Redis not answering: renewals told ErrUnavailable (when the
		// client gives up on them: after its 150 ms read timeout and
		// retries), and the hold runs out.
		crec := newRecorder()
		cut, p := cutOffLocker(t, b, tightKind(150*time.Millisecond), prefix, Options{TTL: 600 * time.Millisecond, Events: crec})
		key = mustKey(t, "ends", "ran-out")
		ls, err = cut.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		p.Blackhole(true)
		select {
		case <-ls.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the cut-off hold did not run out")
		}
		eventually(t, 5*time.Second, "a renewal told ErrUnavailable", func() bool {
			return crec.renewals(key.String(), matches(lockcore.ErrUnavailable)) > 0
		})
		p.Heal()
		_ = ls.Release(ctx)
		if es := crec.endings(key.String()); len(es) != 1 || !errors.Is(es[0].cause, lockcore.ErrLockLost) || es[0].err != nil {
			t.Errorf("endings of the hold that ran out %+v", es)
		}
		rec.balanced(t)
	})
}
