//go:build long

package quorumengine

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// The exclusion runs: sections wanted, and the bound of each run.
const (
	exclusionSections = 10000
	exclusionBound    = 60 * time.Second
)

// checker checks the sections of one key: a holder that finds another
// inside, while its own lease's context is live, is an overlap (a holder
// whose context was cancelled was told of its loss); so is a fence not
// above the last one a live holder entered with.
type checker struct {
	inside   atomic.Int64
	mu       sync.Mutex
	last     int64
	counter  int64
	overlaps atomic.Int64
	backward atomic.Int64
}

func (c *checker) section(ls *lock.Lease) {
	ctx := ls.Context()
	if c.inside.Add(1) != 1 && ctx.Err() == nil {
		c.overlaps.Add(1)
	}
	c.mu.Lock()
	if ctx.Err() == nil {
		if ls.Fence() <= c.last {
			c.backward.Add(1)
		}
		c.last = max(c.last, ls.Fence())
	}
	v := c.counter
	c.mu.Unlock()
	runtime.Gosched()
	c.mu.Lock()
	c.counter = v + 1
	c.mu.Unlock()
	c.inside.Add(-1)
}

// exclusion runs workers goroutines over lockers and keys until at least
// exclusionSections sections ran (or exclusionBound passed), calling
// fault once a fifth of them ran; it fails the test on an overlap or a
// fence out of order, and on fewer sections than wanted.
func exclusion(t *testing.T, lockers []*lock.Locker, keys, workers int, fault func()) {
	t.Helper()
	checkers := make([]*checker, keys)
	ks := make([]lockcore.Key, keys)
	for i := range checkers {
		checkers[i] = &checker{}
		ks[i], _ = lockcore.NewKey("productID", strconv.Itoa(i))
	}
	var sections, lost, unavailable, timedOut atomic.Int64
	deadline := time.Now().Add(exclusionBound)
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(15*time.Second))
	defer cancel()
	faulted := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, k, c := lockers[w%len(lockers)], ks[w%keys], checkers[w%keys]
			for sections.Load() < exclusionSections && time.Now().Before(deadline) {
				if sections.Load() >= exclusionSections/5 {
					once.Do(func() { go func() { fault(); close(faulted) }() })
				}
				ls, err := l.Acquire(ctx, k, lock.Wait(10*time.Second))
				switch {
				case errors.Is(err, lockcore.ErrUnavailable):
					if unavailable.Add(1) <= 3 {
						t.Logf("unavailable: %v", err)
					}
					continue
				case errors.Is(err, lockcore.ErrWaitTimeout):
					timedOut.Add(1)
					continue
				case err != nil:
					errc <- err
					return
				}
				c.section(ls)
				if ls.Err() != nil {
					lost.Add(1)
				}
				sections.Add(1)
				_ = ls.Release(context.Background())
			}
		}()
	}
	wg.Wait()
	once.Do(func() { close(faulted) }) // never started: nothing to wait for
	<-faulted
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	var overlaps, backward, counted int64
	for _, c := range checkers {
		overlaps += c.overlaps.Load()
		backward += c.backward.Load()
		counted += c.counter
	}
	t.Logf("%d sections on %d keys (%d lost while inside), %d overlaps, %d fences out of order; %d acquisitions unavailable, %d timed out",
		sections.Load(), keys, lost.Load(), overlaps, backward, unavailable.Load(), timedOut.Load())
	if overlaps != 0 || backward != 0 {
		t.Errorf("%d overlapping holders, %d fences out of order", overlaps, backward)
	}
	if counted != sections.Load() && lost.Load() == 0 {
		t.Errorf("counter %d after %d sections", counted, sections.Load())
	}
	if n := sections.Load(); n < exclusionSections {
		t.Errorf("%d sections within %v, want %d", n, exclusionBound, exclusionSections)
	}
}

// quorumLockers returns n Lockers, each on an engine of its own with
// clients of its own (a process each) of the masters at addrs.
func quorumLockers(t *testing.T, addrs []string, n int) []*lock.Locker {
	t.Helper()
	var out []*lock.Locker
	for range n {
		var cs []redis.UniversalClient
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			t.Cleanup(func() { _ = c.Close() })
			cs = append(cs, c)
		}
		e := newEngine(t, cs, Options{Prefix: "exclusion:", TTL: 2 * time.Second, MaxTTL: 4 * time.Second, Timeout: 300 * time.Millisecond})
		out = append(out, lock.FromEngine(e))
	}
	return out
}

// realMasters starts three redis-servers, start making each; a machine
// without redis-server fails the test (these runs kill and restart
// processes).
func realMasters(t *testing.T, start func() (*redistest.Server, error)) []*redistest.Server {
	t.Helper()
	var srvs []*redistest.Server
	for range 3 {
		srv, err := start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		srvs = append(srvs, srv)
	}
	return srvs
}

func addrsOf(srvs []*redistest.Server) []string {
	var out []string
	for _, s := range srvs {
		out = append(out, s.Addr)
	}
	return out
}

// TestExclusionMasterKilled: one master of three killed mid-run and
// brought back (with its append-only file) 3 seconds later.
func TestExclusionMasterKilled(t *testing.T) {
	srvs := realMasters(t, redistest.Start)
	lockers := quorumLockers(t, addrsOf(srvs), 4)
	exclusion(t, lockers, 8, 32, func() {
		srvs[0].Kill()
		time.Sleep(3 * time.Second) // the fault's length, not a synchronisation
		if err := srvs[0].Restart(); err != nil {
			t.Error(err)
		}
	})
}

// TestExclusionMasterRestartedEmpty: one master of three, without
// persistence, restarted mid-run: it comes back empty, its restart guard
// refuses fresh grants for MaxTTL, and the holds it lost are confirmed on
// it again by their renewals.
func TestExclusionMasterRestartedEmpty(t *testing.T) {
	srvs := realMasters(t, redistest.StartVolatile)
	lockers := quorumLockers(t, addrsOf(srvs), 4)
	// Servers just started without persistence look restarted: their
	// guards refuse fresh holds for MaxTTL. The run starts past them.
	k, _ := lockcore.NewKey("warm-up")
	ls, err := lockers[0].Acquire(context.Background(), k, lock.Wait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(context.Background())
	exclusion(t, lockers, 8, 32, func() {
		if err := srvs[0].Restart(); err != nil {
			t.Error(err)
		}
	})
	c := redis.NewClient(&redis.Options{Addr: srvs[0].Addr})
	defer c.Close()
	if c.Exists(context.Background(), guardRunKey).Val() != 1 {
		t.Error("the restarted master never decided its restart guard")
	}
}

// TestExclusionMasterPartitioned: one master of three cut off (its
// traffic dropped both ways, connections kept open) for 5 seconds
// mid-run, for every Locker.
func TestExclusionMasterPartitioned(t *testing.T) {
	srvs := realMasters(t, redistest.Start)
	p := faultproxy.Start(t, srvs[0].Addr)
	addrs := addrsOf(srvs)
	addrs[0] = p.Addr
	lockers := quorumLockers(t, addrs, 4)
	exclusion(t, lockers, 8, 32, func() {
		p.Blackhole(true)
		time.Sleep(5 * time.Second) // the fault's length, not a synchronisation
		p.Blackhole(false)
	})
}
