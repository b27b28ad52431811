//go:build long

package redisengine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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

// sales records, per product, when each handler that entered left having
// done its work: a sale.
type sales struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (s *sales) sold(p string, at time.Time) {
	s.mu.Lock()
	s.at[p] = append(s.at[p], at)
	s.mu.Unlock()
}

// longestGap returns, over the products, the longest time in [from, to)
// without a sale: from from to the first sale, between two sales, and from
// the last sale to to.
func (s *sales) longestGap(products []string, from, to time.Time) (time.Duration, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var worst time.Duration
	var which string
	for _, p := range products {
		last := from
		for _, at := range s.at[p] {
			if at.Before(from) {
				continue
			}
			if !at.Before(to) {
				break
			}
			if g := at.Sub(last); g > worst {
				worst, which = g, p
			}
			last = at
		}
		if g := to.Sub(last); g > worst {
			worst, which = g, p
		}
	}
	return worst, which
}

// failoverWhenReady sends SENTINEL FAILOVER once the set is whole again
// after the last one: the master has both replicas online and a sentinel
// takes the command (it refuses one while a failover is in progress). It
// returns when the command was taken.
func failoverWhenReady(t *testing.T, set *redistest.Set) time.Time {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: set.Sentinels[0].Addr, MaxRetries: -1})
	defer sc.Close()
	var at time.Time
	waitFor(t, 60*time.Second, "a sentinel taking SENTINEL FAILOVER on a whole set", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		a, err := sc.GetMasterAddrByName(ctx, redistest.SentinelMaster).Result()
		if err != nil {
			return false
		}
		m := redis.NewClient(&redis.Options{Addr: a[0] + ":" + a[1], MaxRetries: -1})
		info, err := m.Info(ctx, "replication").Result()
		_ = m.Close()
		if err != nil || !strings.Contains(info, "role:master") || !strings.Contains(info, "connected_slaves:2") ||
			strings.Count(info, "state=online") != 2 {
			return false
		}
		if err := sc.Failover(ctx, redistest.SentinelMaster).Err(); err != nil {
			return false // INPROG, NOGOODSLAVE while a replica syncs: again
		}
		at = time.Now()
		return true
	})
	return at
}

// switchMaster makes Sentinel fail the set's master over (failoverWhenReady)
// and returns when it began, once another master is in place. A failover
// that Sentinel took but ended without a new master (it gave up, as one in
// a CI run did: no new master 30 s after SENTINEL FAILOVER was accepted) is
// asked for again, three times at most, 15 s each: the test is of what
// the lock does across failovers, not of Sentinel's own.
func switchMaster(t *testing.T, set *redistest.Set, n int) time.Time {
	t.Helper()
	old := masterOf(t, set)
	for try := 1; ; try++ {
		at := failoverWhenReady(t, set)
		tick := time.NewTicker(20 * time.Millisecond)
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); <-tick.C {
			if masterOf(t, set) != old {
				tick.Stop()
				return at
			}
		}
		tick.Stop()
		if try == 3 {
			t.Fatalf("failover %d: no new master after %d SENTINEL FAILOVERs, 15 s each", n, try)
		}
		t.Logf("failover %d: no new master 15 s after SENTINEL FAILOVER; asking again", n)
	}
}

// TestSentinelFailoversAtDefaults: what a service sees through ten SENTINEL
// FAILOVERs in a row, with the Engine and go-redis at their defaults (only
// a Prefix and a Logger set): 24 workers on 3 Engines, each Engine on a
// failover client of its own, sell 3 hot products, half of them failing
// fast and half waiting up to a second, each sale a section of 2 ms that
// ends early when its lease's context does. No two holders of a product
// are ever inside at once, no fencing token is handed out twice for a
// product or goes below one handed out before it, and no product goes
// more than 3 s without a sale after a failover began (a hold the new
// master has and nobody renews or releases would stop its sales for a
// whole TTL, 10 s).
func TestSentinelFailoversAtDefaults(t *testing.T) {
	if redistest.OwnReal(t) == nil { // redis-server is not on PATH
		return
	}
	set := ownSet(t, redistest.StartSentinelSet)
	var logged logBuffer
	engines := enginesOn(t, set, 3, Options{Prefix: redistest.Prefix(t),
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	products := []string{"p0", "p1", "p2"}
	c := newFenceChecker()
	sold := &sales{at: map[string][]time.Time{}}
	var refused, unavailable, lost, other atomic.Int64
	var lastOther atomic.Value

	stop := make(chan struct{})
	var wg sync.WaitGroup
	deadline := time.Now().Add(4 * time.Minute)
	for w := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[w%3]
			p := products[w%len(products)]
			k := mustKey(t, "sale", p)
			pol := lifecycle.Policy{Wait: lockcore.FailFast}
			if w%2 == 1 {
				pol.Wait = time.Second
			}
			work := time.NewTimer(time.Hour)
			defer work.Stop()
			for i := 0; i < 1000000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				ls, err := e.Acquire(context.Background(), k, pol)
				switch {
				case errors.Is(err, lockcore.ErrNotAcquired):
					refused.Add(1)
					// A buyer refused comes back a little later.
					time.Sleep(time.Millisecond) // pacing, not synchronisation
					continue
				case errors.Is(err, lockcore.ErrUnavailable):
					unavailable.Add(1)
					time.Sleep(time.Millisecond) // pacing, not synchronisation
					continue
				case err != nil:
					other.Add(1)
					lastOther.Store(err.Error())
					continue
				}
				c.enter(p, ls.Fence())
				work.Reset(2 * time.Millisecond)
				select {
				case <-work.C:
				case <-ls.Context().Done():
					lost.Add(1)
				}
				done := ls.Err() == nil
				c.leave(p)
				if done {
					sold.sold(p, time.Now())
				}
				_ = ls.Release(context.Background())
			}
		}()
	}
	end := func() { close(stop); wg.Wait() }
	var ended bool
	defer func() {
		if !ended {
			end()
		}
	}()

	waitFor(t, 20*time.Second, "sales before the first failover", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.entries >= 500
	})
	var switches []time.Time
	for i := range 10 {
		at := switchMaster(t, set, i+1)
		switches = append(switches, at)
		// Sales go on on the new master a while before the next one.
		waitFor(t, 30*time.Second, "4 s of load after the switch", func() bool { return time.Since(at) > 4*time.Second })
	}
	switches = append(switches, time.Now())
	ended = true
	end()

	c.mu.Lock()
	defer c.mu.Unlock()
	lastErr, _ := lastOther.Load().(string)
	t.Logf("%d sections; %d refused as held, %d unavailable, %d other errors (last: %s); %d lost while inside (%d lost-lease log lines)",
		c.entries, refused.Load(), unavailable.Load(), other.Load(), lastErr, lost.Load(),
		strings.Count(logged.String(), "a lease was lost"))
	t.Logf("fencing tokens: %d handed out twice for one product, %d below an earlier one; %d overlapping entries",
		c.repeats, c.backwards, c.overlaps)
	var gaps []time.Duration
	for i := range len(switches) - 1 {
		g, p := sold.longestGap(products, switches[i], switches[i+1])
		gaps = append(gaps, g.Round(time.Millisecond))
		if g > 3*time.Second {
			t.Errorf("failover %d: %s went %v without a sale", i+1, p, g.Round(time.Millisecond))
		}
	}
	t.Logf("the longest time without a sale of a product, per failover: %v (max %v)", gaps, slices.Max(gaps))
	if c.overlaps > 0 || c.repeats > 0 || c.backwards > 0 {
		t.Errorf("%d overlapping entries, %d tokens handed out twice for a product, %d below an earlier one", c.overlaps, c.repeats, c.backwards)
	}
}
