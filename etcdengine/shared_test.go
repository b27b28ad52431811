package etcdengine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/routelock/lock/lockcore"
)

// waits counts, per key, the acquisitions that wait for another owner's
// key, as Events tells them, and signals each change.
type waits struct {
	mu      sync.Mutex
	n       map[lockcore.Key]int
	changed chan struct{}
}

func newWaits() *waits {
	return &waits{n: map[lockcore.Key]int{}, changed: make(chan struct{}, 1)}
}

func (w *waits) Waiting(k lockcore.Key, d int) {
	w.mu.Lock()
	w.n[k] += d
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}
func (w *waits) Woken(lockcore.Key, string)  {}
func (w *waits) Renewed(lockcore.Key, error) {}
func (w *waits) Ended(context.Context, lockcore.Key, time.Duration, time.Duration, error, error) {
}

// await waits, for a bounded time, until n acquisitions of k wait.
func (w *waits) await(t *testing.T, k lockcore.Key, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		w.mu.Lock()
		got := w.n[k]
		w.mu.Unlock()
		if got == n {
			return
		}
		select {
		case <-w.changed:
		case <-deadline:
			t.Fatalf("%d acquisitions of %v wait, want %d", got, k, n)
		}
	}
}

// taken is what a Take returned.
type taken struct {
	h   lockcore.Hold
	err error
}

// takeLater starts e.Take(ctx, r), whose result the channel gets.
func takeLater(ctx context.Context, e *Engine, r lockcore.Request) <-chan taken {
	ch := make(chan taken, 1)
	go func() {
		h, err := e.Take(ctx, r)
		ch <- taken{h, err}
	}()
	return ch
}

// secondWriter runs, on an engine with defect planted, the case in which
// etcd's own read-write mutex once granted two writers: a writer holds;
// a second waits behind it and a third behind the second, watching the
// second's key; the second gives up. It reports whether the third was
// granted while the first still held.
func secondWriter(t *testing.T, defect string) bool {
	cli := startEtcd(t)
	w := newWaits()
	e, err := New(cli, Options{Prefix: "writers/", TTL: 5 * time.Second, Events: w})
	if err != nil {
		t.Fatal(err)
	}
	e.defect = defect
	t.Cleanup(func() { _ = e.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, _ := lockcore.NewKey("item", "1")
	first, err := e.Take(ctx, lockcore.Request{Key: k, Token: "first", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	qctx, quit := context.WithCancel(ctx)
	second := takeLater(qctx, e, lockcore.Request{Key: k, Token: "second", Wait: 20 * time.Second})
	w.await(t, k, 1)
	third := takeLater(ctx, e, lockcore.Request{Key: k, Token: "third", Wait: 20 * time.Second})
	w.await(t, k, 2) // the third found the second's key before its own
	quit()
	if got := <-second; !errors.Is(got.err, lockcore.ErrWaitTimeout) {
		t.Fatalf("the second writer, cancelled: %v", got.err)
	}
	// The third now waits for the first, or was granted beside it: look
	// at the queue until one of them is certain.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case got := <-third:
			if got.err == nil {
				_ = got.h.Release(ctx, nil)
			}
			_ = first.Release(ctx, nil)
			return got.err == nil && first.Err() == nil
		default:
		}
		if revs := queued(t, e, []lockcore.Key{k}); len(revs[k.String()]) == 2 {
			// The second's key is gone, the third's is queued: it waits,
			// until the first releases.
			select {
			case got := <-third:
				if got.err == nil {
					_ = got.h.Release(ctx, nil)
				}
				return got.err == nil
			case <-time.After(300 * time.Millisecond):
			}
			if err := first.Release(ctx, nil); err != nil {
				t.Fatal(err)
			}
			got := <-third
			if got.err != nil {
				t.Fatalf("the third writer after the first released: %v", got.err)
			}
			if got.h.Fence() <= first.Fence() {
				t.Errorf("the third writer's fence %d, not above the first's %d", got.h.Fence(), first.Fence())
			}
			_ = got.h.Release(ctx, nil)
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the queue never settled")
	return false
}

// TestNoTwoWriters: a writer whose predecessor gave up looks again
// before it takes the lock, and waits for the writer that holds it; the
// same case on an engine that takes a predecessor's going for a grant
// (grantOnDelete) grants two writers, so the case catches that.
func TestNoTwoWriters(t *testing.T) {
	t.Run("engine", func(t *testing.T) {
		if secondWriter(t, "") {
			t.Fatal("two writers held the lock at once")
		}
	})
	t.Run("grantOnDelete", func(t *testing.T) {
		if !secondWriter(t, "grantOnDelete") {
			t.Fatal("the planted defect granted no second writer: the case does not catch it")
		}
	})
}

// TestSharedTokens: a writer asking, by a reader's propagated token, for
// the exclusive lock fails at once with ErrUpgrade; a reader carrying the
// token of the writer that holds re-enters the writer's hold (exclusive,
// its fence); a reader carrying a reader's token re-enters that reader's
// hold even with a writer queued (no deadlock); Inspect shows both
// readers and the writer waiting; Revoke ends both readers' holds with
// ErrRevoked and lets the writer in, with a fence above the revocation's.
func TestSharedTokens(t *testing.T) {
	cli := startEtcd(t)
	w := newWaits()
	e, err := New(cli, Options{Prefix: "shared/", TTL: 5 * time.Second, Events: w})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, _ := lockcore.NewKey("item", "2")

	wr, err := e.Take(ctx, lockcore.Request{Key: k, Token: "writer", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	in, err := e.Take(ctx, lockcore.Request{Key: k, Token: "nested", Join: []string{"writer"}, Share: -1, Wait: lockcore.FailFast})
	if err != nil {
		t.Fatalf("a reader carrying the writer's token: %v", err)
	}
	if _, shared := in.Shared(); shared || in.Fence() != wr.Fence() || in.Token() != "writer" {
		t.Errorf("a reader re-entering the writer's hold: shared %v, fence %d, want exclusive, %d", shared, in.Fence(), wr.Fence())
	}
	for _, h := range []lockcore.Hold{in, wr} {
		if err := h.Release(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}

	r1, err := e.Take(ctx, lockcore.Request{Key: k, Token: "r1", Share: -1, Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if h, err := e.Take(ctx, lockcore.Request{Key: k, Token: "up", Join: []string{"r1"}, Wait: 5 * time.Second}); err == nil {
		_ = h.Release(ctx, nil)
		t.Fatal("a reader's token got the exclusive lock")
	} else if !errors.Is(err, lockcore.ErrUpgrade) || errors.Is(err, lockcore.ErrNotAcquired) {
		t.Fatalf("a reader's token asking for the exclusive lock: %v, want ErrUpgrade alone", err)
	} else if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("ErrUpgrade after %v, not at once", took)
	}
	r2, err := e.Take(ctx, lockcore.Request{Key: k, Token: "r2", Share: -1, Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	writer := takeLater(ctx, e, lockcore.Request{Key: k, Token: "late-writer", Wait: 20 * time.Second})
	w.await(t, k, 1)
	re, err := e.Take(ctx, lockcore.Request{Key: k, Token: "nested-2", Join: []string{"r1"}, Share: -1, Wait: time.Second})
	if err != nil {
		t.Fatalf("a reader carrying a reader's token, a writer queued: %v", err)
	}
	if _, shared := re.Shared(); !shared || re.Fence() != r1.Fence() {
		t.Errorf("a reader's re-entry: shared %v, fence %d, want shared, %d", shared, re.Fence(), r1.Fence())
	}
	if err := re.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}

	info, err := e.Inspect(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 2 || info.Holders[0].Share != -1 || info.Holders[1].Share != -1 || len(info.Waiters) != 1 || info.Fence != max(r1.Fence(), r2.Fence()) {
		t.Fatalf("Inspect: %+v; want two readers holding, one writer waiting, the newest reader's fence", info)
	}
	rev, err := e.Revoke(ctx, k, "shared test")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []lockcore.Hold{r1, r2} {
		select {
		case <-h.Done():
			if !errors.Is(h.Err(), lockcore.ErrRevoked) {
				t.Errorf("a revoked reader: %v, want ErrRevoked", h.Err())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a revoked reader's hold did not end")
		}
	}
	got := <-writer
	if got.err != nil {
		t.Fatalf("the writer after the readers were revoked: %v", got.err)
	}
	if got.h.Fence() <= rev.NewFence {
		t.Errorf("the writer's fence %d, not above the revocation's %d", got.h.Fence(), rev.NewFence)
	}
	if err := got.h.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, h := range []lockcore.Hold{r1, r2} {
		_ = h.Release(ctx, nil)
	}
	waitQueued(t, e, []lockcore.Key{k}, 0)
}
