package lockcore

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/redistest"
)

var (
	chaosDur  = flag.Duration("chaos.dur", 3*time.Second, "length of TestChaos (the long mode: -chaos.dur=5m)")
	faultDur  = flag.Duration("faults.dur", 1500*time.Millisecond, "length of each fault in TestFaults")
	chaosSeed = flag.Uint64("chaos.seed", 0, "seed of TestChaos and the fault tests (0: a new one, logged)")
)

// section is one critical section as the checker sees it: held from start
// (Acquire returned) to end (Err still nil after the work), both on this
// process's monotonic clock.
type section struct {
	key        int
	start, end time.Time
	fence      int64
	token      string
}

// chaosConfig is one run of the exclusion checker.
type chaosConfig struct {
	seed        uint64
	dur         time.Duration
	goroutines  int
	lockers     int // the first half go through the proxy
	keys        int
	ttl         time.Duration
	readTimeout time.Duration
	fault       func(ctx context.Context, p *faultproxy.Proxy, rng *rand.Rand) // runs during the load; nil: none
}

// chaosResult is what a run did.
type chaosResult struct {
	sections   int
	errs       map[string]int
	lost       int   // sections whose lease was lost during the work (not counted as held)
	stale      int   // writes the fenced store refused
	overshoot  int64 // worst time an Acquire took beyond its budget, ns
	violations []string
}

// chaosRun runs cfg against b and checks: no two sections of a key overlap,
// fencing tokens grow in hold order, the fenced store never refuses a valid
// holder, and every Acquire returns within its wait budget (and its
// context's deadline) plus the client's I/O bound.
func chaosRun(t *testing.T, b *redistest.Backend, cfg chaosConfig) chaosResult {
	t.Helper()
	prefix := redistest.Prefix(t)
	proxy := faultproxy.Start(t, b.Addr)
	lockers := make([]*Locker, cfg.lockers)
	var clients []*redis.Client
	for i := range lockers {
		addr := b.Addr
		if i < (cfg.lockers+1)/2 {
			addr = proxy.Addr
		}
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 32, ClientName: clientName(prefix),
			DialTimeout: cfg.readTimeout, ReadTimeout: cfg.readTimeout, WriteTimeout: cfg.readTimeout,
			PoolTimeout: cfg.readTimeout})
		clients = append(clients, c)
		l, err := New(c, Options{Prefix: prefix, TTL: cfg.ttl, ReleaseTimeout: cfg.readTimeout})
		if err != nil {
			t.Fatal(err)
		}
		lockers[i] = l
	}
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
		case errors.Is(err, ErrWaitTimeout):
			kind = "wait timeout"
		case errors.Is(err, ErrNotAcquired):
			kind = "busy"
		case errors.Is(err, ErrUnavailable):
			kind = "unavailable"
		case errors.Is(err, ErrLockLost):
			kind = "lost"
		}
		mu.Lock()
		res.errs[kind]++
		mu.Unlock()
	}

	ctx, cancel := context.WithTimeout(context.Background(), cfg.dur)
	defer cancel()
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		if cfg.fault != nil {
			cfg.fault(ctx, proxy, rand.New(rand.NewPCG(cfg.seed, 1)))
		}
	}()

	// acquire takes key k on l with a random policy, timing it against its
	// budget.
	acquire := func(rng *rand.Rand, parent context.Context, l *Locker, k int) (*Lease, error) {
		p := Policy{}
		if rng.IntN(3) > 0 {
			p.Wait = time.Duration(rng.IntN(300)) * time.Millisecond
		}
		actx, acancel := parent, context.CancelFunc(func() {})
		budget := p.Wait
		if rng.IntN(4) == 0 { // a caller that gives up
			d := time.Duration(rng.IntN(200)) * time.Millisecond
			actx, acancel = context.WithTimeout(parent, d)
			budget = min(budget, d)
		}
		defer acancel()
		t0 := time.Now()
		ls, err := l.Acquire(actx, mustKey(t, "k", strconv.Itoa(k)), p)
		// Beyond its budget, an Acquire may take one attempt's I/O (bounded
		// by the read timeout) and the withdrawal after it.
		if o := time.Since(t0) - budget - 3*cfg.readTimeout; o > 0 {
			mu.Lock()
			res.overshoot = max(res.overshoot, int64(o))
			mu.Unlock()
		}
		return ls, err
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
				ls, err := acquire(rng, ctx, l, k)
				if err != nil {
					note(err)
					continue
				}
				start := time.Now()
				fence := ls.Fence()
				// Nest: re-enter the same key, in process or through another
				// Locker with the token, or take a higher key too (ordered,
				// so that nested waits cannot deadlock).
				var inner []*Lease
				switch rng.IntN(4) {
				case 0:
					if in, err := lockers[rng.IntN(len(lockers))].Acquire(ls.Context(), mustKey(t, "k", strconv.Itoa(k)), Policy{}); err == nil {
						if in.Fence() != fence {
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
						if in, err := acquire(rng, ls.Context(), l, k2); err == nil {
							s2 := section{key: k2, start: time.Now(), fence: in.Fence(), token: ls.Token()}
							if write(k2, in.Fence()) && in.Err() == nil {
								s2.end = time.Now()
								mu.Lock()
								sections = append(sections, s2)
								mu.Unlock()
							}
							inner = append(inner, in)
						} else {
							note(err)
						}
					}
				}
				work := time.Duration(rng.IntN(1500)) * time.Microsecond
				if rng.IntN(50) == 0 {
					work = cfg.ttl/2 + time.Duration(rng.IntN(int(cfg.ttl))) // outlives the TTL: the watchdog must renew
				}
				time.Sleep(work) // the work
				okWrite := ls.Err() == nil && write(k, fence)
				end := time.Now()
				lostErr := ls.Err()
				valid := lostErr == nil
				for j := len(inner) - 1; j >= 0; j-- {
					_ = inner[j].Release(ctx)
				}
				_ = ls.Release(ctx)
				mu.Lock()
				switch {
				case valid && okWrite:
					sections = append(sections, section{key: k, start: start, end: end, fence: fence, token: ls.Token()})
				case valid && !okWrite:
					res.stale++
					res.violations = append(res.violations, fmt.Sprintf("fenced store refused a valid holder of k%d (fence %d)", k, fence))
				default:
					res.lost++
					res.errs["lost: "+lostErr.Error()]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	cancel()
	<-faultDone
	proxy.Heal()

	// Once healed, every Locker works again.
	for i, l := range lockers {
		var err error
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var ls *Lease
			if ls, err = l.Acquire(context.Background(), mustKey(t, "healed", strconv.Itoa(i)), Policy{Wait: time.Second}); err == nil {
				err = ls.Release(context.Background())
				if err == nil {
					break
				}
			}
			time.Sleep(20 * time.Millisecond) // retry until the client has reconnected, bounded above
		}
		if err != nil {
			res.violations = append(res.violations, fmt.Sprintf("Locker %d does not work after healing: %v", i, err))
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
	byKey := map[int][]section{}
	for _, s := range sections {
		byKey[s.key] = append(byKey[s.key], s)
	}
	for k, ss := range byKey {
		sort.Slice(ss, func(i, j int) bool { return ss[i].start.Before(ss[j].start) })
		for i := 1; i < len(ss); i++ {
			a, b := ss[i-1], ss[i]
			if b.start.Before(a.end) && a.token != b.token {
				res.violations = append(res.violations, fmt.Sprintf("k%d: holds overlap: fence %d [%v] and fence %d [%v]",
					k, a.fence, a.end.Sub(a.start), b.fence, b.end.Sub(b.start)))
			}
			if b.fence <= a.fence && a.token != b.token {
				res.violations = append(res.violations, fmt.Sprintf("k%d: fence %d held after fence %d", k, b.fence, a.fence))
			}
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
	t.Logf("%s: %d sections held, %d leases lost mid-section, errors %v, %d violations", name, r.sections, r.lost, r.errs, len(r.violations))
	for i, v := range r.violations {
		if i == 20 {
			t.Errorf("… %d more", len(r.violations)-20)
			break
		}
		t.Error(v)
	}
	if r.sections == 0 {
		t.Error("no section ran: the run proves nothing")
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// The faults, each repeated until the load ends.
var faults = map[string]func(ctx context.Context, p *faultproxy.Proxy, rng *rand.Rand){
	"none": nil,
	"latency 0–20ms": func(ctx context.Context, p *faultproxy.Proxy, rng *rand.Rand) {
		for sleepCtx(ctx, 100*time.Millisecond) {
			p.SetLatency(time.Duration(rng.IntN(20)) * time.Millisecond)
		}
	},
	"connection resets": func(ctx context.Context, p *faultproxy.Proxy, rng *rand.Rand) {
		for sleepCtx(ctx, time.Duration(20+rng.IntN(80))*time.Millisecond) {
			p.ResetAll()
		}
	},
	"blackhole mid-hold": func(ctx context.Context, p *faultproxy.Proxy, rng *rand.Rand) {
		for sleepCtx(ctx, time.Duration(100+rng.IntN(300))*time.Millisecond) {
			p.Blackhole(true)
			sleepCtx(ctx, time.Duration(100+rng.IntN(500))*time.Millisecond)
			p.Blackhole(false)
		}
	},
	"refused connections": func(ctx context.Context, p *faultproxy.Proxy, rng *rand.Rand) {
		for sleepCtx(ctx, time.Duration(100+rng.IntN(200))*time.Millisecond) {
			p.Refuse(true)
			p.ResetAll()
			sleepCtx(ctx, time.Duration(50+rng.IntN(200))*time.Millisecond)
			p.Refuse(false)
		}
	},
}

// mixed picks one of the faults at random, again and again.
func mixed(ctx context.Context, p *faultproxy.Proxy, rng *rand.Rand) {
	names := []string{"latency 0–20ms", "connection resets", "blackhole mid-hold", "refused connections"}
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, time.Duration(200+rng.IntN(800))*time.Millisecond)
		faults[names[rng.IntN(len(names))]](fctx, p, rng)
		cancel()
		p.Heal()
	}
}

// TestFaults runs the exclusion checker under each fault between half of
// the Lockers and Redis, on a real redis-server when there is one.
func TestFaults(t *testing.T) {
	s := seed(t)
	b := redistest.Best(t)
	for _, name := range []string{"none", "latency 0–20ms", "connection resets", "blackhole mid-hold", "refused connections"} {
		t.Run(name, func(t *testing.T) {
			r := chaosRun(t, b, chaosConfig{seed: s, dur: *faultDur, goroutines: 16, lockers: 4, keys: 4,
				ttl: 300 * time.Millisecond, readTimeout: 100 * time.Millisecond, fault: faults[name]})
			report(t, name, r)
		})
	}
}

// TestChaos mixes every fault at random, seeded, for -chaos.dur (3s by
// default; go test ./lockcore -run TestChaos -chaos.dur=5m for the long run).
func TestChaos(t *testing.T) {
	s := seed(t)
	b := redistest.Best(t)
	r := chaosRun(t, b, chaosConfig{seed: s, dur: *chaosDur, goroutines: 32, lockers: 6, keys: 6,
		ttl: 300 * time.Millisecond, readTimeout: 100 * time.Millisecond, fault: mixed})
	report(t, "chaos", r)
}
