//go:build long

package redisengine

// The long runs of the script runner under a flushed script cache
// (go test -tags long), which CI runs.

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

// TestScriptFlushDuringPipelinedRenewals: 16 leases taken together
// are renewed in shared pipelines while another client flushes the script
// cache over and over, for 8 TTLs. Each renewal that meets NOSCRIPT is
// run again with EVAL (with or without the shebang, as the server needs):
// no lease is lost, and every release frees its key.
func TestScriptFlushDuringPipelinedRenewals(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := redis.NewClient(&redis.Options{Addr: b.Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		hook := &renewHook{}
		rdb.AddHook(hook)
		admin := b.Client(t)
		// 300 ms: at 120 ms, under the race detector on a loaded 2-core
		// machine, the flushing client (6,600 flushes a second) starved
		// the renewals of every lease once in CI.
		ttl := 300 * time.Millisecond
		if !b.Real() {
			// miniredis runs one command at a time, scripts in a Lua
			// interpreter written in Go: under the race detector, beside
			// the flushes, a renewal's three tries (EVALSHA, EVAL with the
			// shebang, EVAL without) took longer than a 120 ms lease.
			ttl = 500 * time.Millisecond
		}
		l := lockerOn(t, rdb, redistest.Prefix(t), Options{TTL: ttl})
		var leases []*lifecycle.Lease
		for i := range 16 {
			ls, err := l.Acquire(ctx, mustKey(t, "flush", strconv.Itoa(i)), lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, ls)
		}
		flushes := 0
		for end := time.Now().Add(8 * ttl); time.Now().Before(end); flushes++ {
			if err := admin.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%d SCRIPT FLUSHes; %d renewal pipelines met NOSCRIPT", flushes, hook.noscriptPipelines.Load())
		for i, ls := range leases {
			if err := ls.Err(); err != nil {
				t.Errorf("lease %d lost while the script cache was flushed: %v", i, err)
			}
			if err := ls.Release(ctx); err != nil && !errors.Is(err, lockcore.ErrLockLost) {
				t.Errorf("release %d: %v", i, err)
			}
		}
		for i := range 16 {
			if info := inspect(t, l, mustKey(t, "flush", strconv.Itoa(i))); len(info.Holders) > 0 {
				t.Errorf("key %d still held after its release: %+v", i, info)
			}
		}
	})
}

// TestExclusionWhileScriptsFlushed: three Engines on three default
// clients (three "services") contend for one key, with waits, while another
// client flushes the script cache over and over, so that acquisitions,
// hand-overs, renewals and releases keep going through the runner's
// NOSCRIPT fallback (and, on miniredis, the shebang fallback). A shared
// counter checks that no two holders ever overlap, and every holder's
// lease is certain while it holds.
func TestExclusionWhileScriptsFlushed(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		prefix := redistest.Prefix(t)
		ttl := 150 * time.Millisecond
		if !b.Real() {
			// As in TestScriptFlushDuringPipelinedRenewals: on miniredis,
			// under the race detector and beside a flush loop that keeps
			// its one lock busy, a renewal's three tries outlasted the
			// 135 ms a 150 ms lease leaves (a CI run lost one lease so,
			// declared lost in time: no overlap).
			ttl = 500 * time.Millisecond
		}
		var engines []*Engine
		for range 3 {
			rdb := redis.NewClient(&redis.Options{Addr: b.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			engines = append(engines, lockerOn(t, rdb, prefix, Options{TTL: ttl}))
		}
		admin := b.Client(t)
		key := mustKey(t, "excl", "1")
		stop := make(chan struct{})
		flushed := make(chan int)
		go func() {
			n := 0
			defer func() { flushed <- n }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = admin.ScriptFlush(ctx).Err()
				n++
			}
		}()
		var inside, overlaps, done atomic.Int64
		errc := make(chan error, 64)
		const workers, rounds = 12, 12
		finished := make(chan struct{}, workers)
		for w := range workers {
			go func() {
				defer func() { finished <- struct{}{} }()
				e := engines[w%len(engines)]
				for i := range rounds {
					ls, err := e.Acquire(ctx, key, lifecycle.Policy{Wait: 20 * time.Second})
					if err != nil {
						errc <- err
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					if err := ls.Err(); err != nil {
						errc <- err
					}
					if i%4 == 0 { // a longer holder, renewed by the watchdog
						select {
						case <-ls.Context().Done():
						case <-time.After(ttl / 2):
						}
					}
					if err := ls.Err(); err != nil {
						errc <- err
					}
					inside.Add(-1)
					done.Add(1)
					_ = ls.Release(ctx)
				}
			}()
		}
		for range workers {
			select {
			case <-finished:
			case <-time.After(60 * time.Second):
				t.Fatalf("workers stuck: %d of %d rounds done", done.Load(), workers*rounds)
			}
		}
		close(stop)
		t.Logf("%d SCRIPT FLUSHes during %d holds", <-flushed, done.Load())
		close(errc)
		for err := range errc {
			t.Error(err)
		}
		if overlaps.Load() != 0 {
			t.Errorf("%d overlapping holders", overlaps.Load())
		}
		if info := inspect(t, engines[0], key); len(info.Holders) > 0 {
			t.Errorf("key still held at the end: %+v", info)
		}
	})
}

// renewHook counts pipelines that carried at least two renewals and
// came back with NOSCRIPT for them: pipelined renewals that went through
// the runner's fallback.
type renewHook struct{ noscriptPipelines atomic.Int64 }

func (h *renewHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *renewHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *renewHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		n := 0
		for _, c := range cmds {
			a := c.Args()
			if len(a) > 1 && (a[1] == renewScript.sha[0] || a[1] == renewScript.sha[1]) &&
				c.Err() != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				n++
			}
		}
		if n >= 2 {
			h.noscriptPipelines.Add(1)
		}
		return err
	}
}

// TestOOMRenewAndRelease: on a Redis at its maxmemory under the default
// policy (noeviction), a held lease stays held and its release frees the
// key: renewals and releases are flagged allow-oom, which a shebang script
// must be to run at all there. "shebang" is what the engine sends to
// Redis 7; "plain" runs the scripts without the shebang, as on Redis 6.
// Without the flag the renewals failed until the lease was declared lost,
// and the release left the key held until its TTL. A fresh acquire is
// refused (ErrUnavailable) and writes nothing.
func TestOOMRenewAndRelease(t *testing.T) {
	srv := redistest.OwnReal(t)
	if srv == nil {
		return
	}
	for _, variant := range []string{"shebang", "plain"} {
		t.Run(variant, func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = admin.Close() })
			const ttl = 300 * time.Millisecond
			l := lockerOn(t, rdb, redistest.Prefix(t), Options{TTL: ttl})
			if variant == "plain" {
				l.run.plain.Store(true)
			}
			key := mustKey(t, "oom", variant)
			ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			atMaxMemory(t, admin)
			select {
			case <-ls.Context().Done():
				t.Errorf("held lease lost while Redis was at maxmemory: %v", context.Cause(ls.Context()))
			case <-time.After(4 * ttl): // about 13 renewals
			}
			// A fresh lock cannot be taken: nothing of it is written.
			fresh := mustKey(t, "oom", variant, "fresh")
			if _, err := l.Acquire(ctx, fresh, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrUnavailable) {
				t.Errorf("acquire under maxmemory: %v, want ErrUnavailable", err)
			}
			ks := l.redisKeys(fresh)
			if n, err := admin.Exists(ctx, ks[:]...).Result(); err != nil || n != 0 {
				t.Errorf("acquire under maxmemory left %d keys (%v)", n, err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Errorf("release under maxmemory: %v", err)
			}
			if info := inspect(t, l, key); len(info.Holders) > 0 {
				t.Errorf("key still held after its release (TTL %v)", info.TTL)
			}
		})
	}
}
