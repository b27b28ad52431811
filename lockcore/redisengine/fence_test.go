//go:build long

package redisengine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// The fencing tokens' scale (see fence_next in lua/hold.lua): four per
// microsecond of the server's clock since fenceEpoch.
const (
	fenceEpoch = 1250000000000000
	fencePerUS = 4
)

// drawRecord is one token handed to a holder: when its Acquire was
// called and when it returned it, on this process's clock.
type drawRecord struct {
	called, returned time.Time
	fence            int64
	what             string
}

// drawChecker records every token handed to a holder of one key and
// checks that each is above every token handed out before it: above the
// token of every acquisition that returned before its own was called.
type drawChecker struct {
	mu   sync.Mutex
	recs []drawRecord
}

// acquire runs l.Acquire and records the token it hands out.
func (c *drawChecker) acquire(ctx context.Context, l *Engine, key lockcore.Key, p lifecycle.Policy, what string) (*lifecycle.Lease, error) {
	called := time.Now()
	ls, err := l.Acquire(ctx, key, p)
	if err == nil {
		returned := time.Now()
		c.mu.Lock()
		c.recs = append(c.recs, drawRecord{called, returned, ls.Fence(), what})
		c.mu.Unlock()
	}
	return ls, err
}

func (c *drawChecker) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recs)
}

// violations returns the tokens at or below one handed out before them
// (the first few, described), and how many there are.
func (c *drawChecker) violations() ([]string, int) {
	c.mu.Lock()
	byCall := slices.Clone(c.recs)
	c.mu.Unlock()
	byReturn := slices.Clone(byCall)
	slices.SortFunc(byCall, func(a, b drawRecord) int { return a.called.Compare(b.called) })
	slices.SortFunc(byReturn, func(a, b drawRecord) int { return a.returned.Compare(b.returned) })
	var (
		out  []string
		n, i int
		top  drawRecord // the greatest token returned so far
	)
	for _, r := range byCall {
		for ; i < len(byReturn) && byReturn[i].returned.Before(r.called); i++ {
			if byReturn[i].fence > top.fence {
				top = byReturn[i]
			}
		}
		if top.fence != 0 && r.fence <= top.fence {
			n++
			if len(out) < 5 {
				gap := time.Duration((top.fence-r.fence)/fencePerTime(top.fence)) * time.Microsecond
				out = append(out, fmt.Sprintf("%s got %d, %d (%v of clock) below the %d of %s handed out before", r.what, r.fence, top.fence-r.fence, gap, top.fence, top.what))
			}
		}
	}
	return out, n
}

// fenceLoad is how much of each kind of draw a phase of
// checkFencesAcrossLosses makes on its key.
type fenceLoad struct {
	churn    int // exclusive holds, by several goroutines of two Engines (hand-overs in memory among them)
	refusals int // fail-fast attempts that find the lock held
	readers  int // shared holds admitted together by one writer's release
	skipped  int // queued waiters of an Engine that is gone, skipped by a release
	ttl      time.Duration
}

// drawRig runs the phases of checkFencesAcrossLosses on one key.
type drawRig struct {
	t      *testing.T
	c      *drawChecker
	key    lockcore.Key
	prefix string
	load   fenceLoad
	admin  *redis.Client // on the server the Engines use
	a, b   *Engine
}

// engines makes the rig's two Engines on addr, with fence retention ret
// (0: the default).
func (r *drawRig) engines(addr string, ret time.Duration) {
	for _, e := range []*Engine{r.a, r.b} {
		if e != nil {
			_ = e.Close()
		}
	}
	opt := fenceOptions(r.load.ttl, ret)
	r.a = lockerOn(r.t, defaultKind.client(r.t, addr), r.prefix, opt)
	r.b = lockerOn(r.t, defaultKind.client(r.t, addr), r.prefix, opt)
	r.admin = defaultKind.client(r.t, addr)
}

// first takes the lock once after a loss: the restarted server's guard
// refuses for a while, a moved client reconnects.
func (r *drawRig) first(what string) {
	ctx := context.Background()
	var ls *lifecycle.Lease
	eventually(r.t, 10*r.load.ttl+5*time.Second, what, func() bool {
		var err error
		ls, err = r.c.acquire(ctx, r.a, r.key, lifecycle.Policy{Wait: lockcore.FailFast}, what)
		return err == nil
	})
	_ = ls.Release(ctx)
}

// hold takes the lock for a section of the mix, failing the test if it
// cannot within a few TTLs.
func (r *drawRig) hold(e *Engine, what string) *lifecycle.Lease {
	ls, err := r.c.acquire(context.Background(), e, r.key, lifecycle.Policy{Wait: 5*r.load.ttl + time.Second}, what)
	if err != nil {
		r.t.Fatalf("%s: %v", what, err)
	}
	return ls
}

// mix makes the phase's draws: exclusive holds, fail-fast refusals,
// reader admissions, and last the skipped waiters, whose release leaves
// the token key furthest ahead of the clock when the code lets it run
// ahead: of all the draws one script run makes, a skipped waiter's costs
// the least of the server's time (a reader's admission writes more), and
// the waiter behind them is handed the token above them all just before
// the loss that follows.
func (r *drawRig) mix(phase string) {
	ctx := context.Background()
	t, load := r.t, r.load

	// Exclusive holds: four goroutines on each Engine, so that releases
	// hand over in memory and through Redis.
	var left atomic.Int64
	left.Store(int64(load.churn))
	var wg sync.WaitGroup
	for g := range 8 {
		e := r.a
		if g%2 == 1 {
			e = r.b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				ls, err := r.c.acquire(ctx, e, r.key, lifecycle.Policy{Wait: 5*load.ttl + time.Second}, phase+" exclusive")
				if err != nil {
					continue // lost to the load; its token, if any, is not handed out
				}
				_ = ls.Release(ctx)
			}
		}()
	}
	wg.Wait()

	// Fail-fast attempts while the lock is held.
	h := r.hold(r.a, phase+" holder")
	var refused atomic.Int64
	left.Store(int64(load.refusals))
	for g := range 32 {
		e := r.a
		if g%2 == 1 {
			e = r.b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				ls, err := r.c.acquire(ctx, e, r.key, lifecycle.Policy{Wait: lockcore.FailFast}, phase+" fail-fast")
				if err == nil {
					_ = ls.Release(ctx) // the holder's lease ran out under the load
				} else if errors.Is(err, lockcore.ErrNotAcquired) {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	_ = h.Release(ctx)

	// Readers queued behind a writer, admitted together by its release.
	r.readers(phase)

	// Waiters of an Engine whose process is gone (nobody reads their
	// channel), queued ahead of a live one: the release that hands the
	// lock on skips them all.
	if load.skipped > 0 {
		h := r.hold(r.a, phase+" holder")
		q := r.a.redisKeys(r.key)[1]
		arrived := float64(time.Now().UnixMicro())
		deadline := time.Now().Add(time.Minute).UnixMilli()
		entries := make([]redis.Z, 0, 5000)
		for i := range load.skipped {
			entries = append(entries, redis.Z{
				Score:  arrived - float64(load.skipped-i),
				Member: fmt.Sprintf("%d %d %snotify:gone gone.%d.0 %s", deadline, load.ttl.Milliseconds(), r.prefix, i, lifecycle.NewToken()),
			})
			if len(entries) == cap(entries) || i == load.skipped-1 {
				if err := r.admin.ZAdd(ctx, q, entries...).Err(); err != nil {
					t.Fatal(err)
				}
				entries = entries[:0]
			}
		}
		got := make(chan *lifecycle.Lease, 1)
		go func() {
			// Told after half its grant (skipping took longer than half a
			// TTL), it claims the grant first; after all of it, it takes
			// the lock again with a token of a draw of its own, and the
			// one drawn for it goes to nobody.
			ls, _ := r.c.acquire(ctx, r.b, r.key, lifecycle.Policy{Wait: 10*load.ttl + 5*time.Second}, phase+" waiter behind the skipped")
			got <- ls
		}()
		eventually(t, 5*time.Second, "the live waiter queued", func() bool {
			return r.admin.ZCard(ctx, q).Val() == int64(load.skipped+1)
		})
		rel := time.Now()
		_ = h.Release(ctx)
		took := time.Since(rel)
		t.Logf("%s: skipping %d waiters took %v; the last token then led the clock by %v", phase, load.skipped, took, r.lead())
		if took > load.ttl/2 {
			t.Logf("%s: the skipping took longer than half a TTL: the waiter behind it may not get the token drawn for it", phase)
		}
		if ls := <-got; ls != nil {
			_ = ls.Release(ctx)
		}
	}
	t.Logf("%s: %d tokens handed out so far, %d fail-fast refusals; the last token leads the clock by %v", phase, r.c.count(), refused.Load(), r.lead())
}

// readers queues the phase's readers behind a writer and releases it: one
// run of the release script admits them all, a token drawn for each. Once
// every reader's Acquire has returned, they release.
func (r *drawRig) readers(phase string) {
	ctx := context.Background()
	t, load := r.t, r.load
	if load.readers == 0 {
		return
	}
	w := r.hold(r.a, phase+" writer")
	got := make(chan *lifecycle.Lease, load.readers)
	for i := range load.readers {
		e := r.a
		if i%2 == 1 {
			e = r.b
		}
		go func() {
			ls, _ := r.c.acquire(ctx, e, r.key, lifecycle.Policy{Share: lifecycle.ShareAll, Wait: 10*load.ttl + 5*time.Second}, phase+" reader")
			got <- ls
		}()
	}
	q := r.a.redisKeys(r.key)[1]
	eventually(t, 30*time.Second, "the readers queued", func() bool { return r.admin.ZCard(ctx, q).Val() == int64(load.readers) })
	rel := time.Now()
	if err := w.Release(ctx); err != nil {
		t.Fatalf("%s: the writer's release: %v", phase, err)
	}
	took, lead := time.Since(rel), r.lead()
	held := make([]*lifecycle.Lease, 0, load.readers)
	for range load.readers {
		if ls := <-got; ls != nil {
			held = append(held, ls)
		}
	}
	t.Logf("%s: admitting %d readers took %v, the last token then led the clock by %v; %d of them held", phase, load.readers, took, lead, len(held))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(held); i += 8 {
				_ = held[i].Release(ctx)
			}
		}()
	}
	wg.Wait()
}

// probe takes the lock shared, at once (beside any readers that hold it),
// through e: the first draw after a loss, as early as a client can make it.
func (r *drawRig) probe(e *Engine, what string) {
	ctx := context.Background()
	var ls *lifecycle.Lease
	eventually(r.t, 10*r.load.ttl+5*time.Second, what, func() bool {
		var err error
		ls, err = r.c.acquire(ctx, e, r.key, lifecycle.Policy{Share: lifecycle.ShareAll, Wait: lockcore.FailFast}, what)
		return err == nil
	})
	_ = ls.Release(ctx)
}

// lead returns how far the key's last token is ahead of the server's
// clock.
func (r *drawRig) lead() time.Duration {
	ctx := context.Background()
	f, err1 := parseFence(r.admin.Get(ctx, r.a.redisKeys(r.key)[2]).Val())
	now, err2 := r.admin.Time(ctx).Result()
	if err1 != nil || err2 != nil {
		return 0
	}
	if fencePerTime(f) == 1 {
		return time.Duration(f-now.UnixMicro()) * time.Microsecond
	}
	return time.Duration((f-(now.UnixMicro()-fenceEpoch)*fencePerUS)/fencePerUS) * time.Microsecond
}

// fencePerTime returns how many tokens a microsecond of the clock is worth
// at token f's scale: fencePerUS, or 1 for a token of the clock's
// microseconds, which the versions before the scale drew (and an upgrade
// in place may find in F), below the scaled clock by years.
func fencePerTime(f int64) int64 {
	if f < (time.Now().UnixMicro()-fenceEpoch)*fencePerUS-fencePerUS*int64(24*time.Hour/time.Microsecond) {
		return 1
	}
	return fencePerUS
}

// checkFencesAcrossLosses checks that no fencing token is at or below one
// handed out before, across every way Redis loses a key's last token, for
// rounds rounds of: a restart without persistence, a fence retention of
// 1 ms that lapses, and a failover to a replica, which has the old
// master's last tokens, then misses those of the tail; each after a mix of
// exclusive holds (hand-overs in memory among them), fail-fast refusals,
// reader admissions and skipped waiters. After a lapse and a failover the
// lock is taken as soon as a client can (the restart guard delays the
// first hold after a restart anyway), so that a last token that ran ahead
// of the clock by more than the loss took shows as a token below it.
// It returns how many tokens were handed out.
func checkFencesAcrossLosses(t *testing.T, rounds int, load fenceLoad) int {
	srv := redistest.OwnVolatile(t)
	if srv == nil {
		return 0
	}
	r := &drawRig{t: t, c: &drawChecker{}, key: mustKey(t, "fence", "losses"), prefix: redistest.Prefix(t), load: load}
	ctx := context.Background()
	r.engines(srv.Addr, 0)
	r.first("the first hold")
	for round := range rounds {
		// A restart without persistence.
		r.mix(fmt.Sprintf("round %d, before a restart", round))
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		r.first(fmt.Sprintf("round %d, the first hold after the restart", round))

		// A fence retention of 1 ms, which lapses: the lock is taken as
		// soon as the last token's key is gone. On the server just
		// restarted, which keeps no replication backlog yet, draws cost
		// the least clock: where tokens could run furthest ahead of it.
		r.engines(srv.Addr, time.Millisecond)
		phase := fmt.Sprintf("round %d, retention 1ms", round)
		r.mix(phase)
		fk := r.a.redisKeys(r.key)[2]
		for deadline := time.Now().Add(5 * time.Second); r.admin.Exists(ctx, fk).Val() != 0; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the last token's key still there after 5s", phase)
			}
		}
		r.probe(r.a, fmt.Sprintf("round %d, the first hold after the retention lapsed", round))
		r.engines(srv.Addr, 0)

		// A failover: the replica is promoted, the old master goes on
		// serving its clients for a while (the tail the replica missed),
		// then dies, and the clients move to the new master. A client
		// that moved at once takes the lock on the new master right after
		// the draws on the old one, which the new one has, then does not.
		replica := redistest.OwnVolatile(t)
		rc := defaultKind.client(t, replica.Addr)
		if err := rc.ConfigSet(ctx, "repl-diskless-load", "on-empty-db").Err(); err != nil {
			t.Fatal(err) // the replica writes no file of what it loads
		}
		if err := r.admin.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rc.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(srv.Port)).Err(); err != nil {
			t.Fatal(err)
		}
		r.mix(fmt.Sprintf("round %d, replicated", round))
		eventually(t, 10*time.Second, "the replica in sync", func() bool {
			info := rc.Info(ctx, "replication").Val()
			return strings.Contains(info, "master_link_status:up") &&
				rc.Get(ctx, r.a.redisKeys(r.key)[2]).Val() == r.admin.Get(ctx, r.a.redisKeys(r.key)[2]).Val()
		})
		if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
		moved := lockerOn(t, defaultKind.client(t, replica.Addr), r.prefix, fenceOptions(load.ttl, 0))
		r.probe(moved, fmt.Sprintf("round %d, the first hold on the new master", round))
		r.mix(fmt.Sprintf("round %d, the tail the replica missed", round))
		r.probe(moved, fmt.Sprintf("round %d, the first hold on the new master after the tail", round))
		_ = moved.Close()
		srv.Stop()
		srv = replica
		r.engines(srv.Addr, 0)
		r.first(fmt.Sprintf("round %d, the first hold after the failover", round))

	}
	if out, n := r.c.violations(); n > 0 {
		t.Errorf("%d of %d tokens at or below one handed out before:\n%s", n, r.c.count(), strings.Join(out, "\n"))
	}
	return r.c.count()
}

// TestFencesAcrossLosses: one round of each loss of the last token, after a
// mix of every kind of draw; no token is at or below one handed out
// before. Its 10,000 skipped waiters put a last token that gains on the
// clock with each of them (the scripts before the tokens' scale: 16 us of
// clock a draw, against about 13 us that skipping a waiter takes) tens of
// ms ahead of it, far more than a lapsed retention takes to follow. The
// run of over 100,000 tokens is TestFencesAcrossLossesLong.
func TestFencesAcrossLosses(t *testing.T) {
	n := checkFencesAcrossLosses(t, 1, fenceLoad{churn: 100, refusals: 200, readers: 1000, skipped: 10000, ttl: 400 * time.Millisecond})
	t.Logf("%d tokens checked", n)
}
