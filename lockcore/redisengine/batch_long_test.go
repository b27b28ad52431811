//go:build long

package redisengine

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestBatching: under load an Engine's calls leave in pipelines, and each
// caller still gets its own answer: 64 goroutines re-enter and release keys
// of their own and must see their own counts and fences.
func TestBatching(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Universal(t)
		hook := &pipeHook{}
		rdb.AddHook(hook)
		prefix := redistest.Prefix(t)
		// What is checked is batching and re-entry, not latency: 64
		// goroutines on miniredis under the race detector on a loaded
		// machine may wait longer than the default Timeout (1 s).
		slow := Options{Prefix: prefix, Timeout: 10 * time.Second, ReleaseTimeout: 10 * time.Second}
		l, err := New(rdb, slow)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		other := newLocker(t, b, prefix, Options{Timeout: slow.Timeout, ReleaseTimeout: slow.ReleaseTimeout})

		ctx := context.Background()
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := mustKey(t, "b", strconv.Itoa(g))
				for range 20 {
					ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
					if err != nil {
						t.Error(err)
						return
					}
					// The same token through another Engine re-enters in
					// Redis: the count there must be this goroutine's.
					inner, err := other.Acquire(enginetest.WithToken(ctx, ls.Token()), key, lifecycle.Policy{Wait: lockcore.FailFast})
					if err != nil {
						t.Error(err)
						return
					}
					if inner.Fence() != ls.Fence() {
						t.Errorf("re-entry fence %d, hold's %d", inner.Fence(), ls.Fence())
					}
					if err := inner.Release(ctx); err != nil {
						t.Error(err)
					}
					if err := ls.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if n := hook.largest.Load(); n < 2 {
			t.Fatalf("largest pipeline %d calls: 64 goroutines never had their calls batched", n)
		}
		t.Logf("largest pipeline: %d calls", hook.largest.Load())
		for g := range 64 {
			if info := inspect(t, l, mustKey(t, "b", strconv.Itoa(g))); len(info.Holders) > 0 {
				t.Fatalf("key %d still held: %+v", g, info)
			}
		}
	})
}

// TestBatchAfterScriptFlush: calls that leave in a pipeline after Redis
// forgot the scripts are run again with EVAL, each getting its answer.
func TestBatchAfterScriptFlush(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Universal(t)
		hook := &pipeHook{}
		rdb.AddHook(hook)
		l, err := New(rdb, Options{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ls, err := l.Acquire(ctx, mustKey(t, "f", strconv.Itoa(g)), lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil {
					t.Error(err)
					return
				}
				if err := ls.Release(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if hook.largest.Load() < 2 {
			t.Fatalf("largest pipeline %d calls: nothing was batched", hook.largest.Load())
		}
	})
}

// pipeHook records the largest pipeline a client sent.
type pipeHook struct{ largest atomic.Int64 }

func (h *pipeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pipeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for n := int64(len(cmds)); ; {
			old := h.largest.Load()
			if n <= old || h.largest.CompareAndSwap(old, n) {
				break
			}
		}
		return next(ctx, cmds)
	}
}
