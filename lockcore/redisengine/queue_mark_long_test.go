//go:build long

package redisengine

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// markViolations reads, in one script, each lock's queue and last fence
// (KEYS: queue, fence, queue, fence, ...; one slot) and returns those where
// the queue lives beside a fence without the mark: a newcomer's fast path
// would then take the free lock without looking for waiters.
var markViolations = redis.NewScript(`
local out = {}
for i = 1, #KEYS, 2 do
  local f = redis.call('GET', KEYS[i + 1])
  if f and string.match(f, '^%d+$') and redis.call('EXISTS', KEYS[i]) == 1 then
    out[#out + 1] = KEYS[i + 1] .. ' = ' .. f .. ', queued: ' .. table.concat(redis.call('ZRANGE', KEYS[i], 0, -1, 'WITHSCORES'), ' | ')
  end
end
return out
`)

// TestQueueMarkUnderChurn: the acquire script skips its look at the queue
// when the lock's last fence carries no mark (see fence_read in
// lua/hold.lua), which is safe only while a queue never lives beside an
// unmarked fence. Several Engines mix every way of touching a lock's queue
// and fence on two locks of one slot: exclusive waits that time out or are
// withdrawn, holders that vanish (their hold deleted) or are revoked,
// fail-fast cycles, readers and permits, both locks taken at once, hand-overs
// in memory between waiters of one Engine, short fence retention, and
// Engines closed while their waiters wait (grants that nobody claims). A
// checker reads queue and fence together, between scripts, all along: it
// must never find a queue beside an unmarked fence.
func TestQueueMarkUnderChurn(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		prefix := redistest.Prefix(t)
		// A fence retention shorter than a queue's life: the fence lapses
		// while waiters wait, and is written again.
		opt := Options{TTL: 200 * time.Millisecond, FenceRetention: 20 * time.Millisecond, ClaimWindow: 60 * time.Millisecond}
		engines := []*Engine{newLocker(t, b, prefix, opt), newLocker(t, b, prefix, opt), newLocker(t, b, prefix, Options{})}
		same, _ := sameSlot(t, engines[0])
		keys := same[:]
		ks0, ks1 := engines[0].redisKeys(keys[0]), engines[0].redisKeys(keys[1])
		raw := b.Universal(t)
		checkKeys := []string{ks0[1], ks0[2], ks1[1], ks1[2]}

		seed := time.Now().UnixNano()
		t.Logf("seed %d", seed)
		const workers, steps = 8, 150
		deadline := time.Now().Add(40 * time.Second)

		var (
			stop       atomic.Bool
			checks     atomic.Int64
			queuedSeen atomic.Int64
			mu         sync.Mutex
			violations []string
			ops        [10]atomic.Int64
		)
		checkerDone := make(chan struct{})
		go func() {
			defer close(checkerDone)
			for !stop.Load() && time.Now().Before(deadline) {
				out, err := markViolations.Run(ctx, raw, checkKeys).StringSlice()
				if err == nil {
					checks.Add(1)
					if len(out) > 0 {
						mu.Lock()
						violations = append(violations, out...)
						mu.Unlock()
					}
				}
				if n, err := raw.Exists(ctx, ks0[1], ks1[1]).Result(); err == nil && n > 0 {
					queuedSeen.Add(1)
				}
			}
		}()

		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
				for i := 0; i < steps && time.Now().Before(deadline); i++ {
					e := engines[rng.IntN(len(engines))]
					key := keys[rng.IntN(len(keys))]
					op := rng.IntN(10)
					ops[op].Add(1)
					churnStep(ctx, t, b, prefix, opt, raw, e, key, keys, op, rng)
				}
			})
		}
		wg.Wait()
		stop.Store(true)
		<-checkerDone
		t.Logf("%d checks, %d with a queue; ops %v", checks.Load(), queuedSeen.Load(), loadAll(ops[:]))
		if queuedSeen.Load() == 0 {
			t.Fatal("no check saw a queue: the churn did not exercise the mark")
		}
		if len(violations) > 0 {
			t.Fatalf("%d checks found a queue beside an unmarked fence; first: %s", len(violations), violations[0])
		}
	})
}

func loadAll(c []atomic.Int64) []int64 {
	out := make([]int64, len(c))
	for i := range c {
		out[i] = c[i].Load()
	}
	return out
}

// churnStep runs one step of TestQueueMarkUnderChurn. Errors are part of
// the churn (contention, lost leases, revocations, closed Engines): only
// the checker judges.
func churnStep(ctx context.Context, t *testing.T, b *redistest.Backend, prefix string, opt Options,
	raw redis.UniversalClient, e *Engine, key lockcore.Key, keys []lockcore.Key, op int, rng *rand.Rand) {
	hold := func() time.Duration { return time.Duration(rng.IntN(15)) * time.Millisecond }
	wait := func() time.Duration { return time.Duration(1+rng.IntN(120)) * time.Millisecond }
	run := func(ls *lifecycle.Lease, err error) {
		if err != nil {
			return
		}
		if d := hold(); d > 0 {
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-ls.Context().Done():
				timer.Stop()
			}
		}
		_ = ls.Release(ctx)
	}
	switch op {
	case 0, 1: // an exclusive wait, held a moment
		run(e.Acquire(ctx, key, lifecycle.Policy{Wait: wait()}))
	case 2: // a fail-fast cycle
		run(e.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}))
	case 3: // a reader
		run(e.Acquire(ctx, key, lifecycle.Policy{Wait: wait(), Share: -1}))
	case 4: // one of two permits
		run(e.Acquire(ctx, key, lifecycle.Policy{Wait: wait(), Share: 2}))
	case 5: // both locks at once
		p := lifecycle.Policy{Wait: wait()}
		if rng.IntN(2) == 0 {
			p.Wait = lockcore.FailFast
		}
		lss, err := lifecycle.AcquireAll(ctx, e.locker(), keys, p)
		if err == nil {
			for _, ls := range lss {
				_ = ls.Release(ctx)
			}
		}
	case 6: // a holder vanishes: its hold is deleted under it, nobody told
		ls, err := e.Acquire(ctx, key, lifecycle.Policy{Wait: wait()})
		if err == nil {
			ks := e.redisKeys(key)
			_ = raw.Eval(ctx, `local v = redis.call('GET', KEYS[1]) if v and v ~= '~' then redis.call('DEL', KEYS[1]) end return 0`, []string{ks[0]}).Err()
			d := hold()
			if d == 0 {
				d = time.Millisecond
			}
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-ls.Context().Done():
				timer.Stop()
			}
			_ = ls.Release(ctx)
		}
	case 7: // an operator revokes whoever holds
		_, _ = e.Revoke(ctx, key, "churn")
	case 8: // a waiter whose caller goes away
		cctx, cancel := context.WithTimeout(ctx, time.Duration(1+rng.IntN(30))*time.Millisecond)
		ls, err := e.Acquire(cctx, key, lifecycle.Policy{Wait: time.Second})
		cancel()
		if err == nil {
			_ = ls.Release(ctx)
		}
	case 9: // an Engine closed while its waiter waits: a grant nobody claims
		l, err := New(b.Universal(t), Options{Prefix: prefix, TTL: opt.TTL, FenceRetention: opt.FenceRetention, ClaimWindow: opt.ClaimWindow})
		if err != nil {
			return
		}
		done, release := make(chan struct{}), rng.IntN(2) == 0
		go func() {
			defer close(done)
			ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: 300 * time.Millisecond})
			if err == nil && release {
				_ = ls.Release(ctx)
			}
		}()
		timer := time.NewTimer(time.Duration(5+rng.IntN(40)) * time.Millisecond)
		select {
		case <-timer.C:
		case <-done:
			timer.Stop()
		}
		_ = l.Close()
		<-done
	}
}
