//go:build long

package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
)

// A fault run: lockers on engines of their own, each on a client of its
// own given all three members, take keys in turn from many goroutines
// while a fault loop breaks the cluster; a judge checks that no two
// holders of a key are ever inside at once while both their contexts are
// live.
type faultRun struct {
	engines  int           // engines, each on a client of its own
	workers  int           // goroutines
	keys     int           // keys they share
	ttl      time.Duration // the engines' TTL
	sections int64         // at least this many sections, or the run fails
	limit    time.Duration // the run's bound
}

// The workers' acquisitions and sections.
const (
	faultWait  = 3 * time.Second         // each acquisition's Wait
	longEvery  = 50                      // one section in longEvery is held long...
	longHold   = 1500 * time.Millisecond // ...up to this
	shortHold  = 500 * time.Microsecond  // the others up to this
	maxOverlap = 5                       // overlaps described in the log
	hotKeys    = 4                       // the first hotKeys keys are hot...
	hotEvery   = 32                      // ...one turn in hotEvery takes one
)

// judge is the exclusion checker of a fault run: the holder's lease
// context is the judge. A holder entering a key's section while another
// is inside is an overlap unless one of the two contexts was cancelled
// first (that holder was told its lease was lost).
type judge struct {
	t        testing.TB
	mu       sync.Mutex
	inside   map[string]map[*section]struct{}
	paused   map[string]*section // the last paused holder of each key
	overlaps int
	sections int64
}

// section is one holder inside a key's section.
type section struct {
	key     string
	ctx     context.Context
	who     string
	enterAt time.Time
	// For a paused holder: when its context was cancelled (noted by an
	// AfterFunc, so no earlier than that), and the first section another
	// holder entered after it, and whether its context was cancelled by
	// then.
	lostAt     atomic.Int64
	firstOther time.Time
	toldFirst  bool
}

func newJudge(t testing.TB) *judge {
	return &judge{t: t, inside: map[string]map[*section]struct{}{}, paused: map[string]*section{}}
}

// enter notes a holder (who) of key, whose lease's context is ctx,
// entering its section; paused marks the holder the fault loop pauses.
func (j *judge) enter(key string, ctx context.Context, who string, paused bool) *section {
	s := &section{key: key, ctx: ctx, who: who}
	if paused {
		context.AfterFunc(ctx, func() { s.lostAt.Store(time.Now().UnixNano()) })
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	s.enterAt = time.Now()
	for o := range j.inside[key] {
		if o.ctx.Err() == nil && ctx.Err() == nil {
			j.overlaps++
			if j.overlaps <= maxOverlap {
				j.t.Errorf("overlap on %s: %s entered while %s (inside since %v) held it, both contexts live", key, who, o.who, s.enterAt.Sub(o.enterAt))
			}
		}
	}
	if p := j.paused[key]; p != nil && !paused && p.firstOther.IsZero() {
		p.firstOther = s.enterAt
		p.toldFirst = p.ctx.Err() != nil
	}
	if paused {
		j.paused[key] = s
	}
	if j.inside[key] == nil {
		j.inside[key] = map[*section]struct{}{}
	}
	j.inside[key][s] = struct{}{}
	return s
}

// exit notes s leaving its section.
func (j *judge) exit(s *section) {
	j.mu.Lock()
	delete(j.inside[s.key], s)
	j.sections++
	j.mu.Unlock()
}

// counts is what a fault run counts.
type counts struct {
	sections, lost, unavailable, timedOut, faults atomic.Int64
	logf                                          func(format string, args ...any)
	want                                          int64 // sections
}

// more reports whether the run wants more: sections, or faults (fewer
// than minFaults injected). The fault loops go on injecting faults (up to
// maxFaults) while it does, and the workers run until the fault loop
// returns, so that a run whose workers are quick still meets minFaults.
func (n *counts) more() bool { return n.sections.Load() < n.want || n.faults.Load() < minFaults }

// maxFaults bounds the faults of a run; it wants at least minFaults.
const maxFaults, minFaults = 12, 3

// runFaults runs r: its workers over its lockers while fault injects
// faults, until both the workers ran r.sections and fault returned, or
// r.limit passed. fault is given the run's context and the engines; it
// returns when done or when the context ends.
func runFaults(t *testing.T, c *cluster, r faultRun, fault func(ctx context.Context, j *judge, n *counts, engines []*Engine, lockers []*lock.Locker, keys []lockcore.Key)) {
	// Three members, three clients and the race detector allocate a lot
	// on two cores: collect less often.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	began := time.Now()
	prefix := "fault-" + newInstance() + "/"
	var engines []*Engine
	var lockers []*lock.Locker
	for range r.engines {
		cli := c.client()
		e, err := New(cli.Client, Options{Prefix: prefix, TTL: r.ttl, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines = append(engines, e)
		lockers = append(lockers, lock.FromEngine(e))
	}
	var keys []lockcore.Key
	for i := range r.keys {
		k, err := lockcore.NewKey("productID", strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	j := newJudge(t)
	n := counts{logf: t.Logf, want: r.sections}
	ctx, cancel := context.WithTimeout(context.Background(), r.limit)
	defer cancel()
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		fault(ctx, j, &n, engines, lockers, keys)
	}()
	enough := make(chan struct{})
	var enoughOnce sync.Once
	var wg sync.WaitGroup
	var otherErrs atomic.Int64
	for w := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(began.UnixNano())))
			l := lockers[w%len(lockers)]
			who := fmt.Sprintf("worker %d (engine %d)", w, w%len(lockers))
			for {
				select {
				case <-ctx.Done():
					return
				case <-faultDone:
					select {
					case <-enough:
						return
					default:
					}
				default:
				}
				// One turn in hotEvery on one of the hot keys, which
				// several holders want at once; the others mostly alone.
				k := keys[rng.IntN(len(keys))]
				if rng.IntN(hotEvery) == 0 {
					k = keys[rng.IntN(hotKeys)]
				}
				if err := turn(ctx, j, &n, l, k, who, rng); err != nil && otherErrs.Add(1) <= 5 {
					t.Errorf("%s: %v", who, err)
				}
				if n.sections.Load() >= r.sections {
					enoughOnce.Do(func() { close(enough) })
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	<-faultDone
	took := time.Since(began)
	// Every hold was released or lost, and the engines live on: a key of
	// theirs left in etcd past the TTL would hold its lock, or block its
	// queue, for no one.
	if left := keysLeft(c, prefix, 2*r.ttl); len(left) > 0 {
		t.Errorf("%d keys left in etcd %v after the run, on sessions still renewed, such as %s", len(left), 2*r.ttl, strings.Join(left[:min(3, len(left))], ", "))
	}
	t.Logf("%d sections in %v (%d by the judge), %d overlaps, %d holds lost, %d faults injected; refused: %d unavailable, %d timed out",
		n.sections.Load(), took.Round(time.Millisecond), j.sections, j.overlaps, n.lost.Load(), n.faults.Load(), n.unavailable.Load(), n.timedOut.Load())
	if got := n.sections.Load(); got < r.sections {
		t.Errorf("%d sections within %v, want at least %d", got, r.limit, r.sections)
	}
	if j.overlaps != 0 {
		t.Errorf("%d overlapping holders", j.overlaps)
	}
	if f := n.faults.Load(); f < minFaults {
		t.Errorf("%d faults injected, want at least %d", f, minFaults)
	}
}

// turn is one worker's turn: it takes key through l, enters its
// section, holds it a short while (or, once in longEvery, a long one)
// unless the lease's context ends, and releases. Refusals count; an error
// that is neither a refusal nor unavailability is returned.
func turn(ctx context.Context, j *judge, n *counts, l *lock.Locker, key lockcore.Key, who string, rng *rand.Rand) error {
	// Bounded well past the Wait and the longest hold, so that it never
	// ends a section itself.
	actx, cancel := context.WithTimeout(ctx, 4*faultWait+longHold)
	defer cancel()
	began := time.Now()
	ls, err := l.Acquire(actx, key, lock.Wait(faultWait))
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil // the run ended
	case errors.Is(err, lockcore.ErrUnavailable):
		if n.unavailable.Add(1) <= 3 {
			n.logf("%s: refused after %v: %v", who, time.Since(began).Round(time.Millisecond), err)
		}
		return nil
	case errors.Is(err, lockcore.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded):
		if n.timedOut.Add(1) <= 3 {
			n.logf("%s: refused after %v: %v", who, time.Since(began).Round(time.Millisecond), err)
		}
		return nil
	default:
		return err
	}
	lctx := ls.Context()
	s := j.enter(key.String(), lctx, who, false)
	hold := time.Duration(rng.Int64N(int64(shortHold)))
	if rng.IntN(longEvery) == 0 {
		hold = time.Duration(rng.Int64N(int64(longHold)))
	}
	timer := time.NewTimer(hold)
	select {
	case <-lctx.Done():
	case <-timer.C:
	}
	timer.Stop()
	j.exit(s)
	n.sections.Add(1)
	if err := ls.Release(context.WithoutCancel(ctx)); errors.Is(err, lockcore.ErrLockLost) {
		n.lost.Add(1)
	}
	return nil
}

// keysLeft polls, up to d, until etcd has no key under prefix, and
// describes those left: each key, its lease and the lease's time to live,
// its create and last write revisions.
func keysLeft(c *cluster, prefix string, d time.Duration) []string {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var kvs []*mvccpb.KeyValue
	for {
		resp, err := c.admin.Get(ctx, prefix+"q/", clientv3.WithPrefix())
		if err == nil {
			kvs = resp.Kvs
			if len(kvs) == 0 {
				return nil
			}
		}
		if !pace(ctx, 100*time.Millisecond) {
			break
		}
	}
	left := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		ttl := "?"
		lctx, lcancel := context.WithTimeout(context.Background(), time.Second)
		if l, err := c.admin.TimeToLive(lctx, clientv3.LeaseID(kv.Lease)); err == nil {
			ttl = fmt.Sprintf("%ds", l.TTL)
		}
		lcancel()
		left = append(left, fmt.Sprintf("%q (lease %x, %s to live; created at %d, written at %d)", kv.Key, kv.Lease, ttl, kv.CreateRevision, kv.ModRevision))
	}
	return left
}

// pace waits d unless ctx ends first; it reports whether ctx is live.
func pace(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// verifyNoLeaks checks, when the test ends (after every other cleanup:
// clients, engines, the cluster), that it left no goroutine behind.
func verifyNoLeaks(t *testing.T) {
	opts := []goleak.Option{goleak.IgnoreCurrent()}
	t.Cleanup(func() {
		if err := goleak.Find(opts...); err != nil {
			t.Error(err)
		}
	})
}

// TestFaultLeaderKilled: the leader is killed (Close) and restarted on
// its data, several times, while 24 goroutines on three engines take
// 128 keys in turn (four of them hot): no two holders overlap.
func TestFaultLeaderKilled(t *testing.T) {
	verifyNoLeaks(t)
	c := startCluster(t)
	r := faultRun{engines: 3, workers: 24, keys: 128, ttl: 3 * time.Second, sections: 10000, limit: 170 * time.Second}
	runFaults(t, c, r, func(ctx context.Context, j *judge, n *counts, _ []*Engine, _ []*lock.Locker, _ []lockcore.Key) {
		for i := 0; i < maxFaults && n.more(); i++ {
			if !pace(ctx, 4*time.Second) {
				return
			}
			m := c.leader(ctx)
			if m == nil {
				t.Errorf("no leader to kill")
				return
			}
			m.stop()
			n.faults.Add(1)
			if !pace(ctx, 2*time.Second) {
				return
			}
			if err := c.restart(m); err != nil {
				t.Error(err)
				return
			}
			if err := c.waitHealthy(20 * time.Second); err != nil {
				t.Error(err)
				return
			}
		}
	})
}

// TestFaultPartition: a member, the leader every other time, is cut off
// from the others and from every client, then healed, several times,
// while 24 goroutines on three engines take 128 keys in turn (four of them hot): no two
// holders overlap.
func TestFaultPartition(t *testing.T) {
	verifyNoLeaks(t)
	c := startCluster(t)
	r := faultRun{engines: 3, workers: 24, keys: 128, ttl: 3 * time.Second, sections: 10000, limit: 170 * time.Second}
	runFaults(t, c, r, func(ctx context.Context, j *judge, n *counts, _ []*Engine, _ []*lock.Locker, _ []lockcore.Key) {
		for i := 0; i < maxFaults && n.more(); i++ {
			if !pace(ctx, 2*time.Second) {
				return
			}
			m := c.leader(ctx)
			if m == nil {
				t.Errorf("no leader")
				return
			}
			if i%2 == 1 {
				m = c.members[(c.index(m)+1+i/2%2)%3] // a follower
			}
			c.partition(m, true)
			n.faults.Add(1)
			ok := pace(ctx, 3*time.Second)
			c.partition(m, false)
			if !ok {
				return
			}
			if err := c.waitHealthy(20 * time.Second); err != nil {
				t.Error(err)
				return
			}
		}
	})
}

// TestFaultPausedHolder: a holder's process pauses past its lease (it
// sends no keep-alive, and nothing reaches it) while 24 goroutines on
// three engines take 128 keys in turn (four of them hot): it is told its hold is lost, its
// context cancelled with ErrLockLost, by its own clock, before any other
// holder enters: every section entered after its own began after its
// context was cancelled. No two holders overlap.
func TestFaultPausedHolder(t *testing.T) {
	verifyNoLeaks(t)
	c := startCluster(t)
	r := faultRun{engines: 3, workers: 24, keys: 128, ttl: 2 * time.Second, sections: 10000, limit: 170 * time.Second}
	var paused []*section
	runFaults(t, c, r, func(ctx context.Context, j *judge, n *counts, engines []*Engine, lockers []*lock.Locker, keys []lockcore.Key) {
		for i := 0; i < maxFaults && n.more(); i++ {
			if !pace(ctx, 1500*time.Millisecond) {
				return
			}
			e, l, key := engines[i%len(engines)], lockers[i%len(lockers)], keys[i%hotKeys]
			var ls *lock.Lease
			for ls == nil {
				var err error
				ls, err = l.Acquire(ctx, key, lock.Wait(faultWait))
				if ctx.Err() != nil {
					return
				}
				if err != nil && !errors.Is(err, lockcore.ErrUnavailable) && !errors.Is(err, lockcore.ErrNotAcquired) {
					t.Errorf("the holder to pause: %v", err)
					return
				}
			}
			cli := clientOf(c, e)
			lctx := ls.Context()
			s := j.enter(key.String(), lctx, fmt.Sprintf("paused holder %d (engine %d)", i, i%len(engines)), true)
			e.pause.Store(true)
			cli.cutClient(true)
			n.faults.Add(1)
			told := !pace(lctx, 3*r.ttl) && ctx.Err() == nil
			j.exit(s)
			cli.cutClient(false)
			e.pause.Store(false)
			paused = append(paused, s)
			if !told {
				if ctx.Err() == nil {
					t.Errorf("a holder paused for %v was not told its hold was lost", 3*r.ttl)
				}
				_ = ls.Release(context.WithoutCancel(ctx))
				return
			}
			if cause := context.Cause(lctx); !errors.Is(cause, lockcore.ErrLockLost) {
				t.Errorf("the paused holder's cause: %v, want ErrLockLost", cause)
			}
			_ = ls.Release(context.WithoutCancel(ctx))
			n.lost.Add(1)
		}
	})
	taken := 0
	var margin time.Duration = -1
	for _, s := range paused {
		if s.firstOther.IsZero() {
			continue
		}
		taken++
		lost := time.Unix(0, s.lostAt.Load())
		if !s.toldFirst {
			t.Errorf("%s: another holder entered %s before its context was cancelled", s.who, s.key)
		} else if d := s.firstOther.Sub(lost); margin < 0 || d < margin {
			margin = d
		}
	}
	t.Logf("%d holders paused, %d of whose keys another holder took after them; least margin between its loss and that entry %v", len(paused), taken, margin)
	if taken == 0 {
		t.Errorf("no other holder took a paused holder's key")
	}
}

// clientOf returns the client of c that e uses.
func clientOf(c *cluster, e *Engine) *clusterClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.clients {
		if cc.Client == e.cli {
			return cc
		}
	}
	panic("no such client")
}
