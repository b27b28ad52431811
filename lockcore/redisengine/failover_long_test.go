//go:build long

package redisengine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
)

// TestSentinelFailoverFences: 12 workers on 3 Engines lock 4 products
// through a master with 2 replicas under 3 sentinels, each Engine on a
// failover client at go-redis's defaults, while the master changes: by
// SENTINEL FAILOVER with the old master alive, and by the old master
// SIGKILLed. With Options.Replicas 1, no fencing token is handed out twice
// for one product, none is below one handed out before it, and no two
// handlers of one product run at once. Without it, the same holds but for
// the switch window of SENTINEL FAILOVER, when the old master still takes
// writes from the connections the clients kept to it: what happens there
// is logged (the README says what it can be). Either way, waits for
// another holder after the switch are as short as before it: the
// notifications follow the new master.
func TestSentinelFailoverFences(t *testing.T) {
	withReplicas(t, func(t *testing.T, replicas int) {
		for _, how := range []string{"sentinel-failover", "kill-master"} {
			t.Run(how, func(t *testing.T) { testSentinelFailover(t, replicas, how) })
		}
	})
}

// fenceChecker records, per product, the fencing tokens handed to the
// handlers that entered, in the order they entered.
type fenceChecker struct {
	mu        sync.Mutex
	inside    map[string]int
	last      map[string]int64
	seen      map[string]map[int64]bool
	repeats   int // a token handed out twice for one product
	backwards int // a token below the last one entered, nobody else inside
	overlaps  int // entries that found another holder of the product inside
	entries   int
}

func newFenceChecker() *fenceChecker {
	return &fenceChecker{inside: map[string]int{}, last: map[string]int64{}, seen: map[string]map[int64]bool{}}
}

func (c *fenceChecker) enter(p string, fence int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries++
	if c.inside[p] > 0 {
		c.overlaps++
	}
	c.inside[p]++
	if c.seen[p] == nil {
		c.seen[p] = map[int64]bool{}
	}
	switch {
	case c.seen[p][fence]:
		c.repeats++
	case fence < c.last[p] && c.inside[p] == 1:
		c.backwards++
	}
	c.seen[p][fence] = true
	c.last[p] = max(c.last[p], fence)
}

func (c *fenceChecker) leave(p string) {
	c.mu.Lock()
	c.inside[p]--
	c.mu.Unlock()
}

// failoverLoad runs 12 workers on 3 Engines, each Engine with a failover
// client of its own at go-redis's defaults, over 4 products, until stop is
// closed or 60 s pass; every entry goes through c. Each worker records how
// long its acquisitions took, before (phase 0) and after (phase 1) the
// switch.
type failoverLoad struct {
	c       *fenceChecker
	phase   atomic.Int32
	mu      sync.Mutex
	waits   [2][]time.Duration // of acquisitions that waited for another holder
	all     [2][]time.Duration // of every acquisition
	per     [2][3]int          // sections per Engine
	total   [3]atomic.Int64    // sections per Engine, ever
	errs    atomic.Int64
	lastErr atomic.Value
	ops     atomic.Int64
	engines []*Engine
}

func runFailoverLoad(t *testing.T, set *redistest.Set, replicas int, stop <-chan struct{}) (*failoverLoad, func()) {
	t.Helper()
	fl := &failoverLoad{c: newFenceChecker()}
	engines := enginesOn(t, set, 3, Options{Prefix: redistest.Prefix(t), TTL: 2 * time.Second, Replicas: replicas})
	fl.engines = engines
	var wg sync.WaitGroup
	deadline := time.Now().Add(150 * time.Second)
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[w%3]
			p := fmt.Sprint("p", w%4)
			k := mustKey(t, "failover", p)
			for i := 0; i < 100000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				phase := fl.phase.Load()
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				ls, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: 2 * time.Second})
				cancel()
				if err != nil {
					fl.errs.Add(1)
					fl.lastErr.Store(err.Error())
					continue
				}
				took := time.Since(start)
				fl.c.enter(p, ls.Fence())
				fl.ops.Add(1)
				fl.c.leave(p)
				_ = ls.Release(context.Background())
				fl.mu.Lock()
				if took > 500*time.Microsecond { // it waited for another holder
					fl.waits[phase] = append(fl.waits[phase], took)
				}
				fl.all[phase] = append(fl.all[phase], took)
				fl.per[phase][w%3]++
				fl.mu.Unlock()
				fl.total[w%3].Add(1)
			}
		}()
	}
	return fl, wg.Wait
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// masterOf returns the address the sentinels of set give for its master.
func masterOf(t *testing.T, set *redistest.Set) string {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: set.Sentinels[0].Addr, MaxRetries: -1})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a, err := sc.GetMasterAddrByName(ctx, redistest.SentinelMaster).Result()
	if err != nil {
		t.Fatal(err)
	}
	return a[0] + ":" + a[1]
}

// failOver changes the master of set, as how says: "sentinel-failover"
// (SENTINEL FAILOVER, the old master alive) or "kill-master" (SIGKILL),
// and waits until the sentinels name another one.
func failOver(t *testing.T, set *redistest.Set, how string) {
	t.Helper()
	old := masterOf(t, set)
	switch how {
	case "sentinel-failover":
		sc := redis.NewSentinelClient(&redis.Options{Addr: set.Sentinels[0].Addr})
		err := sc.Failover(context.Background(), redistest.SentinelMaster).Err()
		_ = sc.Close()
		if err != nil {
			t.Fatal(err)
		}
	case "kill-master":
		set.Servers[0].Kill()
	}
	waitFor(t, 60*time.Second, "a new master", func() bool { return masterOf(t, set) != old })
}

func testSentinelFailover(t *testing.T, replicas int, how string) {
	set := ownSet(t, redistest.StartSentinelSet)
	stop := make(chan struct{})
	var once sync.Once
	fl, wait := runFailoverLoad(t, set, replicas, stop)
	end := func() { once.Do(func() { close(stop); wait() }) }
	defer end()
	waitFor(t, 20*time.Second, "1000 sections before the switch", func() bool { return fl.ops.Load() >= 1000 })
	failOver(t, set, how)
	// The switch window: every client finds the new master (go-redis
	// redials a master that refused connections after a back-off of its
	// own), and the load runs on it a while.
	var was [3]int64
	for e := range was {
		was[e] = fl.total[e].Load()
	}
	at := fl.ops.Load()
	waitFor(t, 30*time.Second, "every Engine locking after the switch, 1000 sections", func() bool {
		for e := range was {
			if fl.total[e].Load() < was[e]+10 {
				return false
			}
		}
		return fl.ops.Load() >= at+1000
	})
	fl.phase.Store(1)
	at = fl.ops.Load()
	from := time.Now()
	// At least five recheck intervals (ClaimWindow 3/10: 300 ms), so that
	// a waiter that missed a hand-over has been granted since.
	waitFor(t, 30*time.Second, "1000 more sections", func() bool {
		return fl.ops.Load() >= at+1000 && time.Since(from) > 1500*time.Millisecond
	})
	end()

	c := fl.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	before, after := median(fl.waits[0]), median(fl.waits[1])
	lastErr, _ := fl.lastErr.Load().(string)
	t.Logf("%d sections, %d failed acquisitions (last: %s); fencing tokens: %d handed out twice for one product, %d below an earlier one; %d overlaps",
		c.entries, fl.errs.Load(), lastErr, c.repeats, c.backwards, c.overlaps)
	t.Logf("waits for a holder: median %v before (%d), %v after the switch (%d); per Engine %v before, %v after",
		before, len(fl.waits[0]), after, len(fl.waits[1]), fl.per[0], fl.per[1])
	if replicas > 0 && (c.repeats > 0 || c.backwards > 0 || c.overlaps > 0) {
		t.Errorf("with Replicas %d: %d tokens handed out twice, %d below an earlier one, %d overlaps", replicas, c.repeats, c.backwards, c.overlaps)
	}
	if how == "kill-master" && (c.repeats > 0 || c.backwards > 0) {
		t.Errorf("a killed master: %d tokens handed out twice, %d below an earlier one", c.repeats, c.backwards)
	}
	if after > 3*before+20*time.Millisecond {
		t.Errorf("hand-overs after the switch take %v (median), before it %v", after, before)
	}
	for e, n := range fl.per[1] {
		if n == 0 {
			t.Errorf("Engine %d took no lock after the switch: %v", e, fl.per[1])
		}
	}
}
