package redisengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

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
				ls, err := e.Acquire(ctx, k, lockcore.Policy{Wait: 2 * time.Second})
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

// waitFor waits, up to bound, until ok, polling every 20 ms.
func waitFor(t *testing.T, bound time.Duration, what string, ok func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(bound); !ok(); <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", bound, what)
		}
	}
}

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

func testSentinelFailover(t *testing.T, replicas int, how string) {
	set := ownSet(t, redistest.StartSentinelSet)
	stop := make(chan struct{})
	var once sync.Once
	fl, wait := runFailoverLoad(t, set, replicas, stop)
	end := func() { once.Do(func() { close(stop); wait() }) }
	defer end()
	waitFor(t, 20*time.Second, "1000 sections before the switch", func() bool { return fl.ops.Load() >= 1000 })
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

// TestReplicaAcknowledgement: with Options.Replicas, an acquisition counts
// only once that many replicas acknowledged it. A master with 2 replicas
// grants with Replicas 2; asked for 3, or a server with none asked for 1,
// the acquisition fails with ErrUnavailable within about ReplicaTimeout,
// saying how many acknowledged, and the lock is free at once (the hold was
// given back). On a Cluster, whose masters have a replica each, the same
// with 1 and 2.
func TestReplicaAcknowledgement(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		if !b.Real() {
			return // miniredis has no WAIT
		}
		prefix := redistest.Prefix(t)
		have := map[string]int{"redis": 0, "sentinel": 2, "cluster": 1}[b.Name]
		other := lockerOn(t, b.Universal(t), prefix, Options{})
		for _, want := range []int{have, have + 1} {
			if want == 0 {
				continue
			}
			l := lockerOn(t, b.Universal(t), prefix, Options{Replicas: want, ReplicaTimeout: 50 * time.Millisecond})
			k := mustKey(t, "acked", fmt.Sprint(want))
			for _, p := range []lockcore.Policy{{Wait: lockcore.FailFast}, {Wait: time.Second}} {
				start := time.Now()
				ls, err := l.Acquire(context.Background(), k, p)
				took := time.Since(start)
				if want <= have {
					if err != nil {
						t.Fatalf("Replicas %d of %d: %v", want, have, err)
					}
					if ls.Fence() <= 0 {
						t.Fatalf("fence %d", ls.Fence())
					}
					_ = ls.Release(context.Background())
					continue
				}
				if !errors.Is(err, lockcore.ErrUnavailable) || !strings.Contains(err.Error(), fmt.Sprintf("acknowledged by %d of %d replicas", have, want)) {
					t.Fatalf("Replicas %d of %d: %v, want ErrUnavailable saying how many acknowledged", want, have, err)
				}
				if took > time.Second {
					t.Errorf("the failed acquisition took %v", took)
				}
				waitFor(t, 2*time.Second, "the lock given back", func() bool {
					ls, err := other.Acquire(context.Background(), k, lockcore.Policy{Wait: lockcore.FailFast})
					if err != nil {
						return false
					}
					_ = ls.Release(context.Background())
					return true
				})
			}
		}
	})
}

// TestReplicaShortfallIsNoOutage: too few replicas is an answer from
// Redis, not a network failure. Fifty acquisitions at once on a server
// without replicas, with Replicas 1, each fail with ErrUnavailable saying
// "acknowledged by 0 of 1 replicas"; none fails the calls that flew with
// it as if Redis were unreachable (before, a shortfall failed every call
// queued behind it unsent, withdrawals included, which left the holds
// until a background retry); every hold is given back at once; and
// nothing logs Redis as unreachable. An Options.ReplicaTimeout not shorter
// than Timeout is refused.
func TestReplicaShortfallIsNoOutage(t *testing.T) {
	if unreachable(&replicaError{acked: 0, want: 1}) {
		t.Fatal("a replica shortfall counts as Redis unreachable")
	}
	if _, err := New(redistest.InstantClient(t), Options{Replicas: 1, ReplicaTimeout: time.Second}); err == nil {
		t.Fatal("New took a ReplicaTimeout as long as Timeout")
	}
	b := redistest.Best(t)
	if !b.Real() {
		return // miniredis has no WAIT
	}
	var logged logBuffer
	prefix := redistest.Prefix(t)
	l := lockerOn(t, b.Universal(t), prefix, Options{Replicas: 1, ReplicaTimeout: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	rdb := b.Universal(t)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Acquire(context.Background(), mustKey(t, "short", fmt.Sprint(i)), lockcore.Policy{Wait: lockcore.FailFast})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, lockcore.ErrUnavailable) || !strings.Contains(err.Error(), "acknowledged by 0 of 1 replicas") {
			t.Fatalf("an acquisition on a server without replicas: %v", err)
		}
	}
	waitFor(t, 500*time.Millisecond, "every hold given back", func() bool {
		for i := range 50 {
			if n, err := rdb.Exists(context.Background(), prefix+"{short:"+fmt.Sprint(i)+"}").Result(); err != nil || n != 0 {
				return false
			}
		}
		return true
	})
	if strings.Contains(logged.String(), "unreachable") {
		t.Errorf("a shortfall was logged as an outage: %s", logged.String())
	}
}

// TestReplicasDefault: replicas acknowledge acquisitions by default on a
// failover client (Sentinel), which then hands nothing over in memory, and
// on no other client; a negative Replicas turns it off anywhere, and a
// Timeout shorter than the default ReplicaTimeout leaves the WAIT half of
// it.
func TestReplicasDefault(t *testing.T) {
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	defer failover.Close()
	one := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer one.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	for _, tc := range []struct {
		name       string
		rdb        redis.UniversalClient
		opt        Options
		ack, hands int
	}{
		{"sentinel", failover, Options{}, 1, 0},
		{"sentinel, off", failover, Options{Replicas: -1}, 0, defaultLocalHandOvers},
		{"sentinel, 2", failover, Options{Replicas: 2}, 2, 0},
		{"one server", one, Options{}, 0, defaultLocalHandOvers},
		{"one server, off", one, Options{Replicas: -1}, 0, defaultLocalHandOvers},
		{"cluster", cluster, Options{}, 0, defaultLocalHandOvers},
	} {
		e, err := New(tc.rdb, tc.opt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_ = e.Close()
		if e.run.ack != tc.ack || e.opt.LocalHandOvers != tc.hands {
			t.Errorf("%s: replicas %d, hand-overs in memory %d; want %d, %d", tc.name, e.run.ack, e.opt.LocalHandOvers, tc.ack, tc.hands)
		}
	}
	e, err := New(failover, Options{Timeout: 60 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_ = e.Close()
	if e.opt.ReplicaTimeout != 30*time.Millisecond {
		t.Errorf("Timeout 60ms on Sentinel: ReplicaTimeout %v, want 30ms", e.opt.ReplicaTimeout)
	}
}
