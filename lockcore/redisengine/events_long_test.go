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

// TestEventsWaitEnds: a wait told +1 is told -1 however it ends: run out
// (woken by its timer), its context cancelled, Redis not answering, the
// Engine closed. (Granted: TestEventsWake.)
func TestEventsWaitEnds(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		ctx := context.Background()
		holder := newLocker(t, b, prefix, Options{})
		key := mustKey(t, "waitends", "1")
		ls, err := holder.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer ls.Release(ctx)
		queued := func(rec *recorder) func() bool {
			return func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				return rec.waiting[key.String()] == 1
			}
		}
		wantErr := func(t *testing.T, errc <-chan error, target error) {
			t.Helper()
			select {
			case err := <-errc:
				if !errors.Is(err, target) {
					t.Fatalf("wait ended with %v, want %v", err, target)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the wait did not end")
			}
		}
		acquire := func(l *Engine, ctx context.Context, wait time.Duration) <-chan error {
			errc := make(chan error, 1)
			go func() {
				ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: wait})
				if err == nil {
					_ = ls.Release(context.Background())
					err = errors.New("granted")
				}
				errc <- err
			}()
			return errc
		}

		t.Run("ran out", func(t *testing.T) {
			rec := newRecorder()
			l := newLocker(t, b, prefix, Options{Events: rec})
			wantErr(t, acquire(l, ctx, 300*time.Millisecond), lockcore.ErrWaitTimeout)
			if rec.peak != 1 {
				t.Fatalf("peak wait %d, want 1", rec.peak)
			}
			if rec.wokenBy(wokenByTimer) == 0 {
				t.Error("the wait ran out without its timer waking it")
			}
			rec.balanced(t)
		})
		t.Run("cancelled", func(t *testing.T) {
			rec := newRecorder()
			l := newLocker(t, b, prefix, Options{Events: rec})
			cctx, cancel := context.WithCancel(ctx)
			errc := acquire(l, cctx, 10*time.Second)
			eventually(t, 5*time.Second, "queued", queued(rec))
			cancel()
			wantErr(t, errc, context.Canceled)
			rec.balanced(t)
		})
		t.Run("closed", func(t *testing.T) {
			rec := newRecorder()
			l := newLocker(t, b, prefix, Options{Events: rec})
			errc := acquire(l, ctx, 10*time.Second)
			eventually(t, 5*time.Second, "queued", queued(rec))
			_ = l.Close()
			wantErr(t, errc, lockcore.ErrClosed)
			rec.balanced(t)
		})
		t.Run("unavailable", func(t *testing.T) {
			rec := newRecorder()
			l, p := cutOffLocker(t, b, defaultKind, prefix, Options{Events: rec, Timeout: 200 * time.Millisecond, ClaimWindow: 300 * time.Millisecond})
			errc := acquire(l, ctx, 10*time.Second)
			eventually(t, 5*time.Second, "queued", queued(rec))
			p.Blackhole(true) // the waiter's next ask, within 90 ms, is not answered
			wantErr(t, errc, lockcore.ErrUnavailable)
			p.Heal()
			rec.balanced(t)
		})
	})
}
