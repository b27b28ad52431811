package etcdengine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
)

// exclusion runs workers goroutines over lockers, each taking key in
// turn rounds times and holding it for hold, and checks with a shared
// counter, and the holder's context as the judge, that no two holders
// ever overlap: a holder that finds another inside is an overlap unless
// its own context was cancelled first (its lease was lost, and it was
// told). It returns the sections run.
func exclusion(t *testing.T, lockers []*lock.Locker, key lockcore.Key, workers, rounds int, hold time.Duration) int64 {
	t.Helper()
	var inside, overlaps, sections atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[w%len(lockers)]
			for range rounds {
				ls, err := l.Acquire(ctx, key, lock.Wait(30*time.Second))
				if err != nil {
					errc <- err
					return
				}
				if inside.Add(1) != 1 && ls.Context().Err() == nil {
					overlaps.Add(1)
				}
				if hold > 0 {
					select {
					case <-ls.Context().Done():
					case <-time.After(hold):
					}
				}
				inside.Add(-1)
				sections.Add(1)
				_ = ls.Release(ctx)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping holders", n)
	}
	return sections.Load()
}

// TestExclusion: twelve goroutines on three engines (three processes, to
// etcd) take one key in turn; no two hold it at once.
func TestExclusion(t *testing.T) {
	cli := startEtcd(t)
	var lockers []*lock.Locker
	for range 3 {
		e, err := New(cli, Options{Prefix: "exclusion/"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		lockers = append(lockers, lock.FromEngine(e))
	}
	k, _ := lockcore.NewKey("productID", "42")
	n := exclusion(t, lockers, k, 12, 25, 0)
	t.Logf("%d sections", n)
}

// pausedHolder takes key productID:id through one engine and pauses that
// engine (its keep-alives suppressed, as a paused process's are), over a
// fresh embedded etcd; it returns the paused hold, a Locker on another
// engine, both with TTL ttl, and the key, and a context for the test.
func pausedHolder(t *testing.T, prefix string, ttl time.Duration, id string) (held *lock.Lease, other *lock.Locker, k lockcore.Key, ctx context.Context) {
	t.Helper()
	cli := startEtcd(t)
	ea, err := New(cli, Options{Prefix: prefix, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	eb, err := New(cli, Options{Prefix: prefix, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ea.Close(); _ = eb.Close() })
	k, _ = lockcore.NewKey("productID", id)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	held, err = lock.FromEngine(ea).Acquire(ctx, k, lock.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	ea.pause.Store(true) // renewals stop
	return held, lock.FromEngine(eb), k, ctx
}

// TestPausedHolder: a holder whose process stops renewing (its keep-alives
// suppressed, as a paused process's are) is told its lease is lost, its
// context cancelled with ErrLockLost, by its own clock, before etcd
// expires the lease and another engine's waiter takes the key.
func TestPausedHolder(t *testing.T) {
	held, b, k, ctx := pausedHolder(t, "paused/", 2*time.Second, "7")
	var lostAt atomic.Int64
	go func() {
		<-held.Context().Done()
		lostAt.Store(time.Now().UnixNano())
	}()
	next, err := b.Acquire(ctx, k, lock.Wait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Now().UnixNano()
	defer next.Release(ctx)
	// Told by its own clock, a tenth of the TTL before its lease can run
	// out in etcd: well before the next holder, not with it (a holder
	// that learnt of its loss from etcd's delete would be told about when
	// the next one takes the key).
	if l := lostAt.Load(); l == 0 || took-l < int64(100*time.Millisecond) {
		t.Fatalf("the paused holder was told %v before the next holder took the key, want at least 100ms (lost at %d)", time.Duration(took-l), l)
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, lockcore.ErrLockLost) {
		t.Fatalf("the paused holder's cause: %v, want ErrLockLost", cause)
	}
	if next.Fence() <= held.Fence() {
		t.Fatalf("the next holder's fence %d is not above the paused one's %d", next.Fence(), held.Fence())
	}
}

// TestPausedHolderReleases: a paused holder told of its loss by its own
// clock, and released, frees the key at once, before etcd would expire its
// lease: another engine's fail-fast acquisition then gets it.
func TestPausedHolderReleases(t *testing.T) {
	held, b, k, ctx := pausedHolder(t, "paused-release/", 3*time.Second, "9")
	<-held.Context().Done()
	if err := held.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("Release of a lost hold: %v, want ErrLockLost", err)
	}
	next, err := b.Acquire(ctx, k, lock.FailFast())
	if err != nil {
		t.Fatalf("fail-fast acquisition right after the lost holder released: %v, want the key free", err)
	}
	_ = next.Release(ctx)
}
