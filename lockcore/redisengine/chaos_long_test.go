//go:build long

package redisengine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

var (
	chaosDur  = flag.Duration("chaos.dur", 3*time.Second, "length of TestChaos (the long mode: -chaos.dur=5m)")
	faultDur  = flag.Duration("faults.dur", 1500*time.Millisecond, "length of each fault in TestFaults")
	chaosSeed = flag.Uint64("chaos.seed", 0, "seed of TestChaos and the fault tests (0: a new one, logged)")
)

// section is one critical section as the checker sees it, as a handler
// would: held from start (Acquire returned) to end, when the work finished
// or, if sooner, the lease's context was cancelled; both on this process's
// monotonic clock. A section cut short by a lost lease still counts up to
// its cancellation.
type section struct {
	key        int
	start, end time.Time
	fence      int64
	token      string
	revoked    bool   // its holder was told an operator force-released its hold (ErrRevoked)
	clean      bool   // its context was live until its release, which returned nil
	stale      bool   // the fenced store refused its write while its context was live
	how        string // how it ended, for a violation's report
}

// chaosConfig is one run of the exclusion checker.
type chaosConfig struct {
	seed       uint64
	dur        time.Duration
	goroutines int
	lockers    int // the first half go through the proxy
	keys       int
	ttl        time.Duration
	client     redis.Options                                          // every Engine's client, Addr aside
	engine     Options                                                // every Engine's options, Prefix, TTL and MaxTTL aside
	fault      func(ctx context.Context, f *faultEnv, rng *rand.Rand) // runs during the load; nil: none
	srv        *redistest.Server                                      // b's server when the run owns it (restarts, memory limits); nil when shared
}

// faultEnv is what a fault acts on: the proxy between half of the Lockers
// and Redis, and Redis itself.
type faultEnv struct {
	p      *faultproxy.Proxy
	b      *redistest.Backend
	srv    *redistest.Server // b's server when the run owns it, else nil
	admin  *redis.Client     // straight to Redis
	prefix string
	keys   int
	engine Options            // the Engines' options, Prefix and TTL included
	queue  func(k int) string // the Redis key of key k's wait queue
	key    func(k int) lockcore.Key

	mu      sync.Mutex
	revokes int                    // Revoke calls that revoked a hold
	fences  map[int]map[int64]bool // by key, the fences of the holds they revoked
	// by key, the revocations' [Fence, NewFence): a hold handed over in
	// memory from a revoked one, before the revocation reached it, has a
	// fence in between (Options.LocalHandOvers); no other hold can
	ranges map[int][][2]int64
	unsure int // Revoke calls that failed: they may have revoked a hold
}

// revoked notes a Revoke call's outcome on key k.
func (f *faultEnv) revoked(k int, r lockcore.Revocation, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case err == nil:
		f.revokes++
		if f.fences == nil {
			f.fences = map[int]map[int64]bool{}
		}
		if f.fences[k] == nil {
			f.fences[k] = map[int64]bool{}
		}
		f.fences[k][r.Fence] = true
		if f.ranges == nil {
			f.ranges = map[int][][2]int64{}
		}
		f.ranges[k] = append(f.ranges[k], [2]int64{r.Fence, r.NewFence})
	case !errors.Is(err, lockcore.ErrNotHeld):
		f.unsure++
	}
}

// clientConfigs are the client options the fault tests run with: go-redis's
// defaults (3 retries, 3 s timeouts, context deadlines ignored), as
// lock.New and the README build them, with ContextTimeoutEnabled, and
// tight timeouts with and without retries.
var clientConfigs = []struct {
	name string
	opt  redis.Options
}{
	{"defaults", redis.Options{}},
	{"defaults+ctx", redis.Options{ContextTimeoutEnabled: true}},
	{"tight", redis.Options{DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond,
		WriteTimeout: 100 * time.Millisecond, PoolTimeout: 100 * time.Millisecond}},
	{"tight,noretry", redis.Options{MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond,
		WriteTimeout: 100 * time.Millisecond, PoolTimeout: 100 * time.Millisecond}},
}

// chaosEngine is the engine's configuration under chaos: short leases and
// deadlines, so that a run sees many losses, hand-overs and give-ups.
var chaosEngine = Options{Timeout: 100 * time.Millisecond, ReleaseTimeout: 100 * time.Millisecond, ClaimWindow: 300 * time.Millisecond}

// chaosCase is a client and engine configuration of the fault and chaos
// runs.
type chaosCase struct {
	name   string
	opt    redis.Options
	engine Options
}

// chaosConfigs are the client configurations of the fault and chaos runs,
// each with chaosEngine (which hands holds over in memory, as the engine
// does by default: Options.LocalHandOvers), and go-redis's defaults once
// more with every hold handed over through Redis.
var chaosConfigs = func() []chaosCase {
	var out []chaosCase
	for _, cc := range clientConfigs {
		out = append(out, chaosCase{cc.name, cc.opt, chaosEngine})
	}
	queue := chaosEngine
	queue.LocalHandOvers = -1
	return append(out, chaosCase{"defaults,redis-queue", redis.Options{}, queue})
}()

// chaosResult is what a run did.
type chaosResult struct {
	sections   int
	pairs      int // sections of two keys taken together (lifecycle.AcquireAll)
	errs       map[string]int
	inMemory   int   // holds handed over in memory (Options.LocalHandOvers)
	cohort     bool  // the Engines hand holds over in memory
	lost       int   // sections whose lease was lost during the work (counted up to the loss)
	revoked    int   // of those, revoked by an operator
	stale      int   // writes the fenced store refused
	overshoot  int64 // worst time an Acquire took beyond its budget, ns
	violations []string
}

// chaosRun runs cfg against b and checks: no two sections of a key overlap,
// fencing tokens grow in hold order, the fenced store never refuses a valid
// holder, and every Acquire returns within its wait budget (and its
// context's deadline) plus the engine's own bounds on one call and one
// withdrawal, whatever the client's timeouts.
func chaosRun(t *testing.T, b *redistest.Backend, cfg chaosConfig) chaosResult {
	t.Helper()
	prefix := redistest.Prefix(t)
	proxy := faultproxy.Start(t, b.Addr)
	lockers := make([]*Engine, cfg.lockers)
	var clients []*redis.Client
	var inMemory atomic.Int64 // hand-overs in memory
	for i := range lockers {
		addr := b.Addr
		if i < (cfg.lockers+1)/2 {
			addr = proxy.Addr
		}
		opt := cfg.client
		opt.Addr, opt.PoolSize, opt.ClientName = addr, 32, clientName(prefix)
		c := redis.NewClient(&opt)
		clients = append(clients, c)
		eng := cfg.engine
		eng.Prefix, eng.TTL, eng.MaxTTL = prefix, cfg.ttl, cfg.ttl
		if eng.LocalHandOvers >= 0 && eng.Events == nil {
			eng.Events = wokenEvents(func(by string) {
				if by == wokenByMemory {
					inMemory.Add(1)
				}
			})
		}
		l, err := New(c, eng)
		if err != nil {
			t.Fatal(err)
		}
		lockers[i] = l
	}
	eng := lockers[0].opt
	// The same for every client: the engine keeps its bounds whatever the
	// client's options.
	const grace = 50 * time.Millisecond
	defer func() {
		for _, l := range lockers {
			_ = l.Close()
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}()

	var (
		mu       sync.Mutex
		sections []section
		res      = chaosResult{errs: map[string]int{}}
		lastW    = make([]int64, cfg.keys) // the fenced store: last fence written per key
	)
	write := func(key int, fence int64) bool {
		mu.Lock()
		defer mu.Unlock()
		if fence < lastW[key] {
			return false
		}
		lastW[key] = fence
		return true
	}
	note := func(err error) {
		kind := "other"
		switch {
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			kind = "caller gave up"
		case errors.Is(err, lockcore.ErrWaitTimeout):
			kind = "wait timeout"
		case errors.Is(err, lockcore.ErrNotAcquired):
			kind = "busy"
		case errors.Is(err, lockcore.ErrUnavailable):
			kind = "unavailable"
		case errors.Is(err, lockcore.ErrLockLost):
			kind = "lost"
		}
		mu.Lock()
		res.errs[kind]++
		mu.Unlock()
	}

	ctx, cancel := context.WithTimeout(context.Background(), cfg.dur)
	defer cancel()
	faultDone := make(chan struct{})
	env := &faultEnv{p: proxy, b: b, srv: cfg.srv, admin: b.Client(t), prefix: prefix, keys: cfg.keys, engine: eng,
		queue: func(k int) string { return lockers[0].redisKeys(mustKey(t, "k", strconv.Itoa(k)))[1] },
		key:   func(k int) lockcore.Key { return mustKey(t, "k", strconv.Itoa(k)) }}
	go func() {
		defer close(faultDone)
		if cfg.fault != nil {
			cfg.fault(ctx, env, rand.New(rand.NewPCG(cfg.seed, 1)))
		}
	}()

	// acquire takes key k on l with a random policy, timing it against its
	// budget.
	// The returned cancel ends the caller's context: a caller with a
	// deadline keeps it for its whole section, as a request does.
	// With also >= 0, it takes keys k and also together (lifecycle.AcquireAll:
	// in one script when both are free, else one by one, in one budget)
	// and returns their leases in key order: the second's context descends
	// from the first's.
	acquire := func(rng *rand.Rand, parent context.Context, l *Engine, k, also int) (*lifecycle.Lease, *lifecycle.Lease, context.CancelFunc, error) {
		p := lifecycle.Policy{Wait: lockcore.FailFast}
		if rng.IntN(3) > 0 {
			p.Wait = time.Duration(1+rng.IntN(300)) * time.Millisecond
		}
		actx, acancel := parent, context.CancelFunc(func() {})
		budget := max(p.Wait, 0)
		if rng.IntN(4) == 0 { // a caller that gives up
			d := time.Duration(rng.IntN(200)) * time.Millisecond
			actx, acancel = context.WithTimeout(parent, d)
			budget = min(budget, d)
		}
		t0 := time.Now()
		var (
			ls, second *lifecycle.Lease
			err        error
		)
		calls := time.Duration(1)
		if also < 0 {
			ls, err = l.Acquire(actx, mustKey(t, "k", strconv.Itoa(k)), p)
		} else {
			var leases []*lifecycle.Lease
			leases, err = lifecycle.AcquireAll(actx, l.locker(), []lockcore.Key{mustKey(t, "k", strconv.Itoa(also)), mustKey(t, "k", strconv.Itoa(k))}, p)
			if err == nil {
				ls, second = leases[0], leases[1]
			}
			// The group's call, then the last key's past the budget and
			// the rollback.
			calls = 3
		}
		// Beyond its budget, an Acquire may take one call (bounded by the
		// engine's Timeout) and the withdrawal after it (ReleaseTimeout),
		// plus scheduling on a loaded machine.
		if o := time.Since(t0) - budget - calls*(eng.Timeout+eng.ReleaseTimeout) - grace; o > 0 {
			mu.Lock()
			res.overshoot = max(res.overshoot, int64(o))
			mu.Unlock()
		}
		if err != nil {
			acancel()
			acancel = func() {}
		}
		return ls, second, acancel, err
	}

	var wg sync.WaitGroup
	for g := range cfg.goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(g)+2))
			for i := 0; i < 100000 && ctx.Err() == nil; i++ {
				l := lockers[rng.IntN(len(lockers))]
				k := rng.IntN(cfg.keys)
				also := -1
				if k+1 < cfg.keys && rng.IntN(4) == 0 {
					also = k + 1
				}
				ls, second, done, err := acquire(rng, ctx, l, k, also)
				if err != nil {
					note(err)
					continue
				}
				if second != nil {
					mu.Lock()
					res.pairs++
					mu.Unlock()
					if ls.Key() != mustKey(t, "k", strconv.Itoa(k)) {
						k, also = also, k // taken in key order: the first is the outer hold
					}
				}
				start := time.Now()
				fence := ls.Fence()
				// When the lease's context is cancelled, the section ends.
				cut := make(chan time.Time, 1)
				stop := context.AfterFunc(ls.Context(), func() { cut <- time.Now() })
				// Nest: re-enter the same key, in process or through another
				// Engine with the token, or take a higher key too (ordered,
				// so that nested waits cannot deadlock).
				var inner []*lifecycle.Lease
				var innerDone []func() bool
				var innerCancel []context.CancelFunc
				var innerSec []section // the sections of inner, a nested hold's
				var innerOf []int      // the index in inner of each innerSec
				fresh := false         // the nested acquisition found the hold gone and took a fresh one
				// A pair taken together: the second key's lease is a nested
				// hold of the first's.
				nested := func(k2 int, in *lifecycle.Lease) {
					s2 := section{key: k2, start: time.Now(), fence: in.Fence(), token: in.Token()}
					cut2 := make(chan time.Time, 1)
					innerDone = append(innerDone, context.AfterFunc(in.Context(), func() { cut2 <- time.Now() }))
					if in.Context().Err() == nil && write(k2, in.Fence()) {
						s2.end = time.Now()
						select {
						case c := <-cut2:
							s2.end = c
						default:
						}
						innerSec = append(innerSec, s2)
						innerOf = append(innerOf, len(inner))
					}
					inner = append(inner, in)
				}
				choice := rng.IntN(4)
				if second != nil {
					nested(also, second)
					choice = 4 // nothing more nested
				}
				switch choice {
				case 0:
					if in, err := lockers[rng.IntN(len(lockers))].Acquire(ls.Context(), mustKey(t, "k", strconv.Itoa(k)), lifecycle.Policy{Wait: lockcore.FailFast}); err == nil {
						if in.Token() != ls.Token() {
							// Not a re-entry: the outer hold was revoked (or
							// lost) before its Engine heard, and the lock was
							// free; which the outer's end must show.
							fresh = true
						} else if in.Fence() != fence {
							mu.Lock()
							res.violations = append(res.violations, fmt.Sprintf("re-entry of k%d got fence %d, hold has %d", k, in.Fence(), fence))
							mu.Unlock()
						}
						inner = append(inner, in)
					} else {
						note(err)
					}
				case 1:
					if k2 := k + 1 + rng.IntN(2); k2 < cfg.keys {
						if in, _, done2, err := acquire(rng, ls.Context(), l, k2, -1); err == nil {
							innerCancel = append(innerCancel, done2)
							nested(k2, in)
						} else {
							note(err)
						}
					}
				}
				work := time.Duration(rng.IntN(1500)) * time.Microsecond
				if rng.IntN(50) == 0 {
					work = cfg.ttl/2 + time.Duration(rng.IntN(int(cfg.ttl))) // outlives the TTL: the watchdog must renew
				}
				// The work, as a handler does it: until done or its context
				// is cancelled; it writes through the fenced store only if
				// its context is still live.
				wt := time.NewTimer(work)
				select {
				case <-wt.C:
				case <-ls.Context().Done():
				}
				wt.Stop()
				live := ls.Context().Err() == nil
				okWrite := live && write(k, fence)
				end := time.Now()
				innerLost := make([]error, len(inner))
				for j, in := range inner {
					innerLost[j] = context.Cause(in.Context())
				}
				innerRel := make([]error, len(inner))
				for j := len(inner) - 1; j >= 0; j-- {
					innerRel[j] = inner[j].Release(ctx)
				}
				for j, s2 := range innerSec {
					lost, rel := innerLost[innerOf[j]], innerRel[innerOf[j]]
					// Its context ends with the outer's, and the outer's cause:
					// it was told of its own revocation only if the outer was not
					// revoked, or by its release.
					s2.revoked = errors.Is(rel, lockcore.ErrRevoked) ||
						errors.Is(lost, lockcore.ErrRevoked) && !errors.Is(context.Cause(ls.Context()), lockcore.ErrRevoked)
					s2.clean = lost == nil && rel == nil
					s2.how = fmt.Sprintf("nested; lost %v, release %v", lost, rel)
					mu.Lock()
					sections = append(sections, s2)
					mu.Unlock()
				}
				for _, f := range innerDone {
					f()
				}
				for _, f := range innerCancel {
					f()
				}
				if !stop() || !live {
					// Cancelled before the work ended (not by this Release):
					// the section ended then.
					select {
					case c := <-cut:
						if c.Before(end) {
							end = c
						}
					case <-time.After(time.Second):
					}
				}
				lostErr := context.Cause(ls.Context())
				relErr := ls.Release(ctx)
				done()
				// A force-released holder may run on until its Engine hears of
				// the revocation (or its release does); the fenced store then
				// refuses its late write.
				revoked := errors.Is(lostErr, lockcore.ErrRevoked) || errors.Is(relErr, lockcore.ErrRevoked)
				mu.Lock()
				sections = append(sections, section{key: k, start: start, end: end, fence: fence, token: ls.Token(), revoked: revoked,
					clean: lostErr == nil && relErr == nil, stale: live && !okWrite && !revoked,
					how: fmt.Sprintf("live at the work's end %v; lost %v, release %v", live, lostErr, relErr)})
				switch {
				case live && !okWrite && !revoked:
					res.stale++ // judged below: only a revoked hold may be refused
				case !live:
					res.lost++
					res.errs["lost: "+lostErr.Error()]++
				}
				if revoked {
					res.revoked++
				}
				if fresh && live && !revoked {
					res.violations = append(res.violations, fmt.Sprintf("a nested acquisition of k%d took a fresh hold beside its live outer hold (fence %d)", k, fence))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	cancel()
	<-faultDone
	proxy.Heal()
	healed := time.Now()

	// Once healed, and with every holder gone, every lock is free again
	// within the claim window: no attempt whose caller was told it failed,
	// and no waiter that returned, still holds one.
	{
		bound := eng.ClaimWindow + 200*time.Millisecond
		for k := range cfg.keys {
			var info lockcore.Info
			ok := eventuallyOK(bound+time.Second, func() bool {
				var err error
				info, err = lockers[len(lockers)-1].Inspect(context.Background(), mustKey(t, "k", strconv.Itoa(k)))
				return err == nil && len(info.Holders) == 0
			})
			if took := time.Since(healed); !ok || took > bound {
				res.violations = append(res.violations, fmt.Sprintf("k%d still held %v after the heal with every holder gone (want free within %v): %+v", k, took.Round(time.Millisecond), bound, info))
			}
		}
	}

	// Once healed, every Engine works again.
	for i, l := range lockers {
		var err error
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var ls *lifecycle.Lease
			if ls, err = l.Acquire(context.Background(), mustKey(t, "healed", strconv.Itoa(i)), lifecycle.Policy{Wait: time.Second}); err == nil {
				err = ls.Release(context.Background())
				if err == nil {
					break
				}
			}
			time.Sleep(20 * time.Millisecond) // retry until the client has reconnected, bounded above
		}
		if err != nil {
			res.violations = append(res.violations, fmt.Sprintf("Engine %d does not work after healing: %v", i, err))
		}
	}

	// Nothing leaks: no connection or subscription of the run's clients is
	// left on the server once they are closed.
	for _, l := range lockers {
		_ = l.Close()
	}
	for _, c := range clients {
		_ = c.Close()
	}
	proxy.Close()
	if b.Real() {
		admin := b.Client(t)
		var left string
		deadline := time.Now().Add(5 * time.Second)
		for {
			list, _ := admin.ClientList(context.Background()).Result()
			chans, _ := admin.PubSubChannels(context.Background(), prefix+"*").Result()
			left = ""
			if n := strings.Count(list, "name="+clientName(prefix)+" "); n > 0 || len(chans) > 0 {
				left = fmt.Sprintf("%d connections, channels %v", n, chans)
			}
			if left == "" || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond) // the server notices closed connections soon, bounded above
		}
		if left != "" {
			res.violations = append(res.violations, "left on the server after closing: "+left)
		}
	}

	// The checker.
	res.sections = len(sections)
	res.inMemory, res.cohort = int(inMemory.Load()), cfg.engine.LocalHandOvers >= 0
	byKey := map[int][]section{}
	for _, s := range sections {
		byKey[s.key] = append(byKey[s.key], s)
	}
	// A hold an operator revoked (by the fences Revoke returned) may be
	// used until its holder hears of it, even by a waiter woken by a grant
	// the revocation took back: fenced, not exclusive.
	forced := func(s section) bool {
		if env.fences[s.key][s.fence] {
			return true
		}
		for _, r := range env.ranges[s.key] {
			if r[0] < s.fence && s.fence < r[1] {
				return true
			}
		}
		return false
	}
	for k, ss := range byKey {
		sort.Slice(ss, func(i, j int) bool { return ss[i].start.Before(ss[j].start) })
		// Each section against every earlier one still running when it
		// began, not only the one before it.
		var open []section
		for i, b := range ss {
			open = slices.DeleteFunc(open, func(a section) bool { return !a.end.After(b.start) })
			for _, a := range open {
				if a.token != b.token && !forced(a) && !forced(b) {
					res.violations = append(res.violations, fmt.Sprintf("k%d: holds overlap: fence %d [%v; %s] and fence %d [%v, from %v before its end; %s]",
						k, a.fence, a.end.Sub(a.start), a.how, b.fence, b.end.Sub(b.start), a.end.Sub(b.start), b.how))
				}
			}
			open = append(open, b)
			if i > 0 {
				if a := ss[i-1]; b.fence <= a.fence && a.token != b.token && !forced(b) {
					res.violations = append(res.violations, fmt.Sprintf("k%d: fence %d held after fence %d", k, b.fence, a.fence))
				}
			}
		}
	}
	// Only a hold an operator revoked is told it was, and each is told: by
	// its context's cause or its release, unless it was lost first.
	// With hand-overs in memory, a holder whose hold was revoked just
	// before its release, and that had not heard of it yet, hands it over
	// with no call to Redis: a successor in its chain is told instead
	// (Options.LocalHandOvers), the first whose pass call runs: the next
	// fence, or a later one of the chain when the ones in between handed
	// on before their calls were sent. A chain's fences are consecutive
	// and within the maxLocalHandOvers its first hold reserved.
	fences := map[int]map[int64]bool{} // by key, the fences held
	for _, s := range sections {
		if fences[s.key] == nil {
			fences[s.key] = map[int64]bool{}
		}
		fences[s.key][s.fence] = true
	}
	toldSuccessor := func(s section) bool {
		if cfg.engine.LocalHandOvers < 0 {
			return false
		}
		for _, n := range byKey[s.key] {
			if n.fence > s.fence && n.fence <= s.fence+maxLocalHandOvers && n.revoked {
				// Its chain: every fence in between was held (each
				// successor in memory gets a lease, and a section here).
				chain := true
				for f := s.fence + 1; f < n.fence; f++ {
					chain = chain && fences[s.key][f]
				}
				if chain {
					return true
				}
			}
		}
		return false
	}
	for _, s := range sections {
		// A hold an operator revoked is fenced out: the store may refuse it
		// before it hears of the revocation; one that then never hears of
		// it (it handed the hold over in memory) must have a successor in
		// its chain that did.
		if s.stale && !(forced(s) && toldSuccessor(s)) {
			res.violations = append(res.violations, fmt.Sprintf("fenced store refused a live holder of k%d (fence %d)", s.key, s.fence))
		}
		if forced(s) && s.clean && !toldSuccessor(s) {
			var chain []string // what the holds that could have been told saw
			for _, n := range byKey[s.key] {
				if n.fence >= s.fence && n.fence <= s.fence+maxLocalHandOvers {
					chain = append(chain, fmt.Sprintf("fence %d: %s", n.fence, n.how))
				}
			}
			res.violations = append(res.violations, fmt.Sprintf("k%d: the holder of fence %d was revoked, and released it without being told (revocations %v; the chain: %v)",
				s.key, s.fence, env.ranges[s.key], chain))
		}
		if s.revoked && !forced(s) && env.unsure == 0 {
			var near []int64
			for f := range env.fences[s.key] {
				if f > s.fence-50 && f < s.fence+50 {
					near = append(near, f)
				}
			}
			res.violations = append(res.violations, fmt.Sprintf("k%d: the holder of fence %d was told of a revocation no Revoke returned (%s; revoked near it: %v)", s.key, s.fence, s.how, near))
		}
	}
	if res.overshoot > 0 {
		res.violations = append(res.violations, fmt.Sprintf("an Acquire overran its wait budget by %v beyond the I/O bound", time.Duration(res.overshoot)))
	}
	return res
}

// clientName names the run's connections, for CLIENT LIST.
// (redistest.Prefix ends in a random hex part: CLIENT SETNAME takes no
// spaces or non-ASCII, which test names may have.)
func clientName(prefix string) string {
	parts := strings.Split(strings.TrimSuffix(prefix, ":"), ":")
	return "chaos-" + parts[len(parts)-1]
}

// seed returns the seed to use, logging it so that a failure can be
// reproduced with -chaos.seed.
func seed(t *testing.T) uint64 {
	s := *chaosSeed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -chaos.seed=%d)", s, s)
	return s
}

func report(t *testing.T, name string, r chaosResult) {
	t.Helper()
	t.Logf("%s: %d sections held (%d pairs of keys taken together, %d handed over in memory), %d leases lost mid-section, errors %v, %d violations", name, r.sections, r.pairs, r.inMemory, r.lost, r.errs, len(r.violations))
	for i, v := range r.violations {
		if i == 20 {
			t.Errorf("… %d more", len(r.violations)-20)
			break
		}
		t.Error(v)
	}
	if r.sections == 0 || r.pairs == 0 || r.cohort && r.inMemory == 0 {
		t.Errorf("%d sections, %d pairs, %d hand-overs in memory ran: the run proves too little", r.sections, r.pairs, r.inMemory)
	}
}

// The faults, each repeated until the load ends.
var faults = map[string]func(ctx context.Context, f *faultEnv, rng *rand.Rand){
	"none": nil,
	"latency 0–20ms": func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		for sleepCtx(ctx, 100*time.Millisecond) {
			f.p.SetLatency(time.Duration(rng.IntN(20)) * time.Millisecond)
		}
	},
	"connection resets": func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		for sleepCtx(ctx, time.Duration(20+rng.IntN(80))*time.Millisecond) {
			f.p.ResetAll()
		}
	},
	// A partition: Redis sees the proxied Lockers' connections alive, so
	// their waiters are granted locks they never claim.
	"blackhole mid-hold": func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		for sleepCtx(ctx, time.Duration(100+rng.IntN(300))*time.Millisecond) {
			f.p.Blackhole(true)
			sleepCtx(ctx, time.Duration(100+rng.IntN(500))*time.Millisecond)
			f.p.Blackhole(false)
		}
	},
	// As if the proxied Lockers' processes died: Redis sees their
	// connections close, and their queued waiters are skipped.
	"refused connections": func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		for sleepCtx(ctx, time.Duration(100+rng.IntN(200))*time.Millisecond) {
			f.p.Refuse(true)
			f.p.ResetAll()
			sleepCtx(ctx, time.Duration(50+rng.IntN(200))*time.Millisecond)
			f.p.Refuse(false)
		}
	},
	// Redis runs a call and its reply is lost: the client re-sends it.
	"lost replies": func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		for sleepCtx(ctx, time.Duration(5+rng.IntN(30))*time.Millisecond) {
			f.p.LoseReplyTo([]byte("evalsha"), 1)
		}
	},
	// Redis stops answering anyone for longer than tight clients wait
	// (DEBUG SLEEP; a real redis-server only).
	"stalls": func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		for f.b.Real() && sleepCtx(ctx, time.Duration(100+rng.IntN(400))*time.Millisecond) {
			d := time.Duration(50+rng.IntN(400)) * time.Millisecond
			_ = f.admin.Do(context.Background(), "debug", "sleep", strconv.FormatFloat(d.Seconds(), 'f', 3, 64)).Err()
		}
	},
	// The proxied Lockers' subscriptions hear nothing, while their commands
	// work: every hand-over message to them is lost.
	"deaf subscriptions": func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		for sleepCtx(ctx, time.Duration(50+rng.IntN(200))*time.Millisecond) {
			f.p.DeafenSubscriptions(true)
			sleepCtx(ctx, time.Duration(100+rng.IntN(1000))*time.Millisecond)
			f.p.DeafenSubscriptions(false)
		}
	},
	// Waiters of processes that are gone, at the head of a key's queue: a
	// hundred whose deadline passed, and a few whose channel nobody reads.
	"dead waiters": func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		for i := 0; sleepCtx(ctx, time.Duration(50+rng.IntN(150))*time.Millisecond); i++ {
			now := time.Now().UnixMilli()
			var zs []redis.Z
			for j := range 103 {
				dl := now - 1000
				if j >= 100 {
					dl = now + 5000
				}
				m := fmt.Sprintf("%d 300 %snotify:gone dead.%d.%d %s", dl, f.prefix, i, j, lifecycle.NewToken())
				zs = append(zs, redis.Z{Score: float64(j), Member: m})
			}
			_ = f.admin.ZAdd(context.Background(), f.queue(rng.IntN(f.keys)), zs...).Err()
		}
	},
}

// faultNames lists the faults TestFaults runs, in order; "stalls" needs a
// real redis-server, "memory pressure" and "restart without persistence"
// one of the run's own.
var faultNames = []string{"none", "latency 0–20ms", "connection resets", "blackhole mid-hold", "refused connections",
	"lost replies", "stalls", "deaf subscriptions", "dead waiters",
	"refused after a lost reply", "outage, callers leave", "re-sent revokes", "memory pressure", "restart without persistence"}

func init() {
	// A call runs, its reply is lost, and Redis (or its host) then refuses
	// connections for a while: the client's re-sends fail to dial.
	faults["refused after a lost reply"] = func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		defer f.p.AfterLoss(nil)
		f.p.AfterLoss(func() { f.p.Refuse(true); f.p.ResetAll() })
		for sleepCtx(ctx, time.Duration(20+rng.IntN(80))*time.Millisecond) {
			f.p.LoseReplyTo([]byte("evalsha"), 1)
			sleepCtx(ctx, time.Duration(100+rng.IntN(400))*time.Millisecond)
			f.p.LoseReplyTo(nil, 0)
			f.p.Refuse(false)
		}
	}
	// An outage longer than most waits and callers' deadlines: waiters give
	// up and leave while their withdrawals cannot reach Redis.
	faults["outage, callers leave"] = func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		for sleepCtx(ctx, time.Duration(50+rng.IntN(150))*time.Millisecond) {
			f.p.Refuse(true)
			f.p.ResetAll()
			sleepCtx(ctx, time.Duration(300+rng.IntN(600))*time.Millisecond)
			f.p.Refuse(false)
		}
	}
	// An operator force-releases locks through the proxy, with go-redis at
	// its defaults, and some replies are lost, so the client re-sends the
	// call: each call revokes one hold at most, whatever the first run found.
	faults["re-sent revokes"] = func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		c := redis.NewClient(&redis.Options{Addr: f.p.Addr})
		defer c.Close()
		op, err := New(c, f.engine)
		if err != nil {
			panic(err)
		}
		defer op.Close()
		sha := []byte(op.run.sha(revokeScript))
		for sleepCtx(ctx, time.Duration(20+rng.IntN(100))*time.Millisecond) {
			if rng.IntN(2) == 0 {
				f.p.LoseReplyTo(sha, 1)
			}
			k := rng.IntN(f.keys)
			r, err := op.Revoke(context.Background(), f.key(k), "chaos")
			f.revoked(k, r, err)
			f.p.LoseReplyTo(nil, 0)
		}
	}
	// Redis at its maxmemory under noeviction while the app writes cache
	// entries with a TTL: fresh acquisitions are refused (ErrUnavailable),
	// held locks are kept and released. (A policy that evicts is refused
	// by Check and Acquire; see TestEvictingServerRefused.)
	faults["memory pressure"] = func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		if f.srv == nil {
			return
		}
		bg := context.Background()
		defer f.admin.ConfigSet(bg, "maxmemory", "0")
		for sleepCtx(ctx, time.Duration(50+rng.IntN(200))*time.Millisecond) {
			used, err := f.admin.Info(bg, "memory").Result()
			if err != nil {
				continue
			}
			var n int64
			for _, line := range strings.Split(used, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
					n, _ = strconv.ParseInt(v, 10, 64)
				}
			}
			_ = f.admin.ConfigSet(bg, "maxmemory", strconv.FormatInt(n+256<<10, 10)).Err()
			value := strings.Repeat("x", 1024)
			for i := 0; i < 2000 && ctx.Err() == nil; i++ {
				if err := f.admin.Set(bg, fmt.Sprintf("%scache:%d", f.prefix, i), value, time.Minute).Err(); err != nil {
					break // at maxmemory
				}
			}
			sleepCtx(ctx, time.Duration(100+rng.IntN(400))*time.Millisecond)
			_ = f.admin.ConfigSet(bg, "maxmemory", "0").Err()
			for i := 0; i < 2000; i += 500 {
				keys := make([]string, 0, 500)
				for j := i; j < i+500; j++ {
					keys = append(keys, fmt.Sprintf("%scache:%d", f.prefix, j))
				}
				_ = f.admin.Del(bg, keys...).Err()
			}
		}
	}
	// Redis is killed (SIGKILL) and started again empty, while locks are
	// held and awaited: its restart guard keeps every fresh hold out until
	// every lease granted before could have ended.
	faults["restart without persistence"] = func(ctx context.Context, f *faultEnv, rng *rand.Rand) {
		if f.srv == nil {
			return
		}
		for sleepCtx(ctx, time.Duration(200+rng.IntN(600))*time.Millisecond) {
			if err := f.srv.Restart(); err != nil {
				panic(err)
			}
		}
	}
}

// chaosBackend is the Redis a fault run uses: a redis-server of the run's
// own without persistence when one can be started (restarts and memory
// limits are then faults too), else the best shared backend.
func chaosBackend(t *testing.T) (*redistest.Backend, *redistest.Server) {
	if srv := redistest.OwnVolatile(t); srv != nil {
		return &redistest.Backend{Name: "redis", Addr: srv.Addr}, srv
	}
	return redistest.Best(t), nil
}

// ownServerFaults need a redis-server of the run's own: on a machine
// without one they do not run.
var ownServerFaults = map[string]bool{"memory pressure": true, "restart without persistence": true}

// mixed picks one of the faults at random, again and again.
func mixed(ctx context.Context, f *faultEnv, rng *rand.Rand) {
	names := faultNames[1:]
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, time.Duration(200+rng.IntN(800))*time.Millisecond)
		faults[names[rng.IntN(len(names))]](fctx, f, rng)
		cancel()
		f.p.Heal()
	}
}

// TestFaults runs the exclusion checker under each fault between half of
// the Lockers and Redis, on a real redis-server when there is one, with
// each client configuration.
func TestFaults(t *testing.T) {
	s := seed(t)
	b, srv := chaosBackend(t)
	for _, cc := range chaosConfigs {
		t.Run(cc.name, func(t *testing.T) {
			for _, name := range faultNames {
				b := b
				if ownServerFaults[name] && srv == nil {
					continue
				}
				if name == "stalls" && srv == nil {
					// DEBUG SLEEP: a real redis-server that accepts DEBUG only.
					bs := redistest.DebugBackends(t)
					if len(bs) == 0 {
						continue
					}
					b = bs[0]
				}
				t.Run(name, func(t *testing.T) {
					r := chaosRun(t, b, chaosConfig{seed: s, dur: *faultDur, goroutines: 16, lockers: 4, keys: 4,
						ttl: 300 * time.Millisecond, client: cc.opt, engine: cc.engine, fault: faults[name], srv: srv})
					report(t, name, r)
				})
			}
		})
	}
}

// TestChaos mixes every fault at random, seeded, for -chaos.dur (3s by
// default; go test -tags long ./lockcore/redisengine -run TestChaos
// -chaos.dur=5m for a longer run),
// with each client configuration.
func TestChaos(t *testing.T) {
	s := seed(t)
	b, srv := chaosBackend(t)
	for _, cc := range chaosConfigs {
		t.Run(cc.name, func(t *testing.T) {
			r := chaosRun(t, b, chaosConfig{seed: s, dur: *chaosDur, goroutines: 32, lockers: 6, keys: 6,
				ttl: 300 * time.Millisecond, client: cc.opt, engine: cc.engine, fault: mixed, srv: srv})
			report(t, "chaos", r)
		})
	}
}

// wokenEvents is an Events that reports what woke each waiter.
type wokenEvents func(by string)

func (wokenEvents) Waiting(lockcore.Key, int)         {}
func (f wokenEvents) Woken(_ lockcore.Key, by string) { f(by) }
func (wokenEvents) Renewed(lockcore.Key, error)       {}
func (wokenEvents) Ended(context.Context, lockcore.Key, time.Duration, time.Duration, error, error) {
}
