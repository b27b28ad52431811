package redisengine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// lossChecker records, per product, who is inside and whether a holder
// that another holder joined was told its hold was lost, and when.
type lossChecker struct {
	mu       sync.Mutex
	inside   map[string]*heldSection
	overlaps int             // entries that found another holder of the product inside
	told     int             // of those, holders inside that were told before they left
	silent   int             // holders inside that left untold
	delays   []time.Duration // from the overlapping entry to the holder being told
	entries  int
	fences   map[string]int64
	repeats  int
}

type heldSection struct {
	joined time.Time // when another holder entered, or zero
	ls     *lockcore.Lease
}

func (c *lossChecker) enter(p string, ls *lockcore.Lease) *heldSection {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries++
	if ls.Fence() <= c.fences[p] {
		c.repeats++
	}
	c.fences[p] = max(c.fences[p], ls.Fence())
	s := &heldSection{ls: ls}
	if old := c.inside[p]; old != nil && old.joined.IsZero() {
		c.overlaps++
		old.joined = time.Now()
	}
	c.inside[p] = s
	return s
}

// leave ends s; told is when its holder was told its hold was lost, or
// zero.
func (c *lossChecker) leave(p string, s *heldSection, told time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inside[p] == s {
		delete(c.inside, p)
	}
	if s.joined.IsZero() {
		return
	}
	if told.IsZero() {
		c.silent++
		return
	}
	c.told++
	c.delays = append(c.delays, told.Sub(s.joined))
}

// TestClusterFailover: 12 workers on 3 Engines, each on a ClusterClient at
// go-redis's defaults, hold locks on 4 products whose keys live on one
// master of a 3-master Cluster with a replica each, each for up to 300 ms
// or until told the hold is lost, while that master is failed over: by
// CLUSTER FAILOVER on its replica (coordinated: the replica has every
// write when it takes over), and by SIGKILL (the replica takes over after
// the node timeout, and may lack the last writes). Coordinated, no two
// holders of a product overlap. Killed, a hold the promoted replica lacks
// may be granted again while its holder runs: every such holder is told
// (its context ends with ErrLockLost) before it leaves, and the log says
// how long after the second holder entered. No fencing token repeats or
// goes backwards either way.
func TestClusterFailover(t *testing.T) {
	if redistest.OwnReal(t) == nil { // redis-server is not on PATH
		return
	}
	for _, how := range []string{"cluster-failover", "kill-master"} {
		t.Run(how, func(t *testing.T) { testClusterFailover(t, how) })
	}
}

func testClusterFailover(t *testing.T, how string) {
	set, err := redistest.StartClusterSet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Stop)
	conf := set.Conf()
	admin := conf.Open(nil).(*redis.ClusterClient)
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()

	// Four products on the slots of one master, and that master's replica.
	var target redis.ClusterSlot
	waitFor(t, 10*time.Second, "the first slots' master and replica", func() bool {
		slots, err := admin.ClusterSlots(ctx).Result()
		for _, s := range slots {
			if err == nil && s.Start == 0 && len(s.Nodes) >= 2 {
				target = s
				return true
			}
		}
		return false
	})
	var products []string
	for i := 0; len(products) < 4 && i < 10000; i++ {
		p := fmt.Sprint("p", i)
		k := mustKey(t, "failover", p)
		slot, err := admin.ClusterKeySlot(ctx, "{"+k.String()+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		if int(slot) >= target.Start && int(slot) <= target.End {
			products = append(products, p)
		}
	}
	if len(products) < 4 || len(target.Nodes) < 2 {
		t.Fatalf("products %v on slots %d-%d, nodes %v", products, target.Start, target.End, target.Nodes)
	}
	masterAddr, replicaAddr := target.Nodes[0].Addr, target.Nodes[1].Addr

	prefix := redistest.Prefix(t)
	var engines []*Engine
	for range 3 {
		rdb := conf.Open(nil)
		t.Cleanup(func() { _ = rdb.Close() })
		e, err := New(rdb, Options{Prefix: prefix, TTL: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines = append(engines, e)
	}
	c := &lossChecker{inside: map[string]*heldSection{}, fences: map[string]int64{}}
	var ops, errs atomic.Int64
	var lastErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[w%3]
			p := products[w%4]
			k := mustKey(t, "failover", p)
			hold := time.NewTimer(time.Hour)
			defer hold.Stop()
			for i := 0; i < 100000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				actx, cancel := context.WithTimeout(ctx, 3*time.Second)
				ls, err := e.Acquire(actx, k, lockcore.Policy{Wait: 2 * time.Second})
				cancel()
				if err != nil {
					errs.Add(1)
					lastErr.Store(err.Error())
					continue
				}
				s := c.enter(p, ls)
				ops.Add(1)
				hold.Reset(time.Duration(50+(i*37+w*11)%250) * time.Millisecond)
				var told time.Time
				select {
				case <-hold.C:
				case <-ls.Context().Done():
					if errors.Is(context.Cause(ls.Context()), lockcore.ErrLockLost) {
						told = time.Now()
					}
				case <-stop:
				}
				c.leave(p, s, told)
				_ = ls.Release(context.Background())
			}
		}()
	}
	end := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer end()

	waitFor(t, 20*time.Second, "100 sections before the failover", func() bool { return ops.Load() >= 100 })
	switched := time.Now()
	switch how {
	case "cluster-failover":
		rc := redis.NewClient(&redis.Options{Addr: replicaAddr})
		err := rc.ClusterFailover(ctx).Err()
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
	case "kill-master":
		for _, s := range set.Servers {
			if s.Addr == masterAddr {
				s.Kill()
			}
		}
	}
	waitFor(t, 30*time.Second, "the replica a master", func() bool {
		rc := redis.NewClient(&redis.Options{Addr: replicaAddr, MaxRetries: -1})
		defer rc.Close()
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	})
	promoted := time.Since(switched)
	at := ops.Load()
	waitFor(t, 60*time.Second, "100 sections after the failover", func() bool { return ops.Load() >= at+100 })
	t.Logf("the replica was a master %v after the %s; 100 more sections ran %v after it", promoted.Round(time.Millisecond), how, time.Since(switched).Round(time.Millisecond))
	end()

	c.mu.Lock()
	defer c.mu.Unlock()
	le, _ := lastErr.Load().(string)
	t.Logf("%d sections, %d failed acquisitions (last: %s); %d overlaps: %d holders told before they left, %d silent; delays from the second entry to the first holder told: %v; %d fencing tokens repeated or backwards",
		c.entries, errs.Load(), le, c.overlaps, c.told, c.silent, c.delays, c.repeats)
	if how == "cluster-failover" && c.overlaps > 0 {
		t.Errorf("a coordinated failover let %d holders overlap", c.overlaps)
	}
	if c.silent > 0 {
		t.Errorf("%d holders whose hold was granted again were never told", c.silent)
	}
	if c.repeats > 0 {
		t.Errorf("%d fencing tokens repeated or went backwards", c.repeats)
	}
}
