package locktest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// Bounds of the suite. A check fails, rather than hangs, when an engine
// never does what it waits for.
const (
	// checkBound bounds one check.
	checkBound = 30 * time.Second
	// awaitBound bounds each wait for a state: a waiter queued, a context
	// cancelled, a key freed.
	awaitBound = 5 * time.Second
	// pollEvery is how often an eventual check looks again.
	pollEvery = 2 * time.Millisecond
)

// failFast is a Policy that fails at once on a lock held by another owner:
// a Wait of lockcore.FailFast (see lock.Policy).
var failFast = lifecycle.Policy{Wait: lockcore.FailFast}

// Run checks that the engines newEngine makes keep lockcore.Engine's
// contract, served by a Locker as lock.FromEngine serves them, and
// lockcore.Operator's when they implement it. Each check is a
// subtest of t, named after what it checks (Exclusion, FIFO,
// InMemoryReentry, TokenReentry, TokenGrantsNothing, Policy, Withdrawal,
// FencingOrder, Release, Events, MaxHold, and of shared holds Shared,
// WriterBound, Permits and Upgrade, SeveralKeys (lifecycle.AcquireAll),
// and Gates for a lockcore.Gatekeeper;
// LossThroughContext and Operator for an
// Operator; Close for an engine with a Close() error method; of kept
// results (Promises.Results) Results, ResultsLoss (for an Operator),
// ResultsOnce and ResultsStored). The checks that load the backend
// (Exclusion, Shared, Permits and SeveralKeys with 64 goroutines on one
// key, ResultsOnce with 16 on a few) run one after the other, each alone
// on the backend; the others then run in parallel.
//
// newEngine is called with a subtest's t for every engine the check needs,
// and once with t itself (and a nil ev) to learn what the engine
// implements. Engines made with one t share one backend, as the processes
// of one service do, and report to ev when it is non-nil; engines made with
// different t's must not see each other's keys. newEngine closes what it
// makes with t.Cleanup. An in-memory engine may return one engine for all
// the calls with one t.
//
// The checks wait for states through ev and the engine's own methods, not
// by sleeping, and each wait is bounded: an engine that never does what a
// check waits for fails it within seconds.
func Run(t *testing.T, newEngine func(t *testing.T, ev lockcore.Events) lockcore.Engine) {
	t.Helper()
	probe := newEngine(t, nil)
	_, operator := probe.(lockcore.Operator)
	_, closer := probe.(interface{ Close() error })
	_, gates := probe.(lockcore.Gatekeeper)
	_, results := probe.(lockcore.Results)
	promised := probe.Promises()
	var unpromised []string
	for _, c := range checks {
		if c.operator && !operator || c.closer && !closer || c.gates && !gates {
			continue
		}
		if c.needs != nil && !c.needs(promised) || c.results && !results {
			unpromised = append(unpromised, c.name)
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			if !c.load {
				t.Parallel()
			}
			r := newRig(t, newEngine)
			r.promised = promised
			c.run(r)
		})
	}
	if len(unpromised) > 0 {
		t.Logf("not run, as the engine does not promise what they check: %s", strings.Join(unpromised, ", "))
	}
}

// check is one check of the suite.
type check struct {
	name     string
	operator bool // needs a lockcore.Operator
	closer   bool // needs a Close() error method
	gates    bool // needs a lockcore.Gatekeeper
	// results: needs a lockcore.Results, besides its promise; an engine
	// that promises Results and is none (a wrapper that hides the
	// methods) keeps no results for the Locker either
	// (lifecycle.ResultsOf), and is not checked for them
	results bool
	// needs: whether the engine promises what the check checks (nil:
	// every engine does)
	needs func(lockcore.Promises) bool
	// load: 64 goroutines on one key (16 on a few for ResultsOnce). Such checks run one at a time,
	// not beside the others: on a backend that runs one script at a time
	// (miniredis), four of them at once under the race detector queue
	// calls for longer than a lease lasts, and the check measures the
	// backend's speed rather than the engine's promises.
	load bool
	run  func(r *rig)
}

var checks = []check{
	{name: "Exclusion", load: true, run: checkExclusion},
	{name: "FIFO", needs: needFIFO, run: checkFIFO},
	{name: "InMemoryReentry", run: checkInMemoryReentry},
	{name: "TokenReentry", needs: needTokenReentry, run: checkTokenReentry},
	{name: "TokenGrantsNothing", run: checkTokenGrantsNothing},
	{name: "Policy", run: checkPolicy},
	{name: "Withdrawal", run: checkWithdrawal},
	{name: "LossThroughContext", operator: true, run: checkLossThroughContext},
	{name: "FencingOrder", needs: needOrderedFences, run: checkFencingOrder},
	{name: "Release", run: checkRelease},
	{name: "Events", run: checkEvents},
	{name: "Operator", operator: true, run: checkOperator},
	{name: "Close", closer: true, run: checkClose},
	{name: "MaxHold", run: checkMaxHold},
	{name: "Shared", load: true, needs: needShared, run: checkShared},
	{name: "WriterBound", needs: needShared, run: checkWriterBound},
	{name: "Permits", load: true, needs: needPermits, run: checkPermits},
	{name: "Upgrade", needs: needUpgrade, run: checkUpgrade},
	{name: "SeveralKeys", load: true, run: checkSeveralKeys},
	{name: "Gates", gates: true, needs: needSharedAndPermits, run: checkGates},
	{name: "Results", results: true, needs: needResults, run: checkResults},
	{name: "ResultsLoss", results: true, operator: true, needs: needResults, run: checkResultsLoss},
	{name: "ResultsOnce", results: true, load: true, needs: needResults, run: checkResultsOnce},
	{name: "ResultsStored", results: true, needs: needResults, run: checkResultsStored},
	{name: "ResultsInLine", results: true, needs: needResults, run: checkResultsInLine},
}

// What the checks that not every engine passes need the engine to
// promise.
func needFIFO(p lockcore.Promises) bool          { return p.FIFO }
func needTokenReentry(p lockcore.Promises) bool  { return p.TokenReentry }
func needOrderedFences(p lockcore.Promises) bool { return p.OrderedFences }
func needShared(p lockcore.Promises) bool        { return p.Shared }
func needPermits(p lockcore.Promises) bool       { return p.Permits }
func needUpgrade(p lockcore.Promises) bool       { return p.Shared && p.Permits && p.TokenReentry }
func needSharedAndPermits(p lockcore.Promises) bool {
	return p.Shared && p.Permits
}

// rig is what one check works with: two engines on one backend, reporting
// to one recorder.
type rig struct {
	t         *testing.T
	newEngine func(t *testing.T, ev lockcore.Events) lockcore.Engine
	ctx       context.Context // ends with the check's bound
	ev        *recorder
	ea, eb    lockcore.Engine   // the engines
	a, b      lifecycle.Locker  // and the Lockers on them
	promised  lockcore.Promises // what the engines promise
}

// orderedFences reports whether the engines promise lockcore.OrderedFences:
// the checks that see fences look at their order only then.
func (r *rig) orderedFences() bool { return r.promised.OrderedFences }

func newRig(t *testing.T, newEngine func(t *testing.T, ev lockcore.Events) lockcore.Engine) *rig {
	ctx, cancel := context.WithTimeout(context.Background(), checkBound)
	t.Cleanup(cancel)
	ev := newRecorder()
	r := &rig{t: t, newEngine: newEngine, ctx: ctx, ev: ev, ea: newEngine(t, ev), eb: newEngine(t, ev)}
	r.a, r.b = lifecycle.Serve(r.ea, ev), lifecycle.Serve(r.eb, ev)
	return r
}

// another returns a Locker on a further engine of the check's backend.
func (r *rig) another() lifecycle.Locker {
	return lifecycle.Serve(r.newEngine(r.t, r.ev), r.ev)
}

// key returns the key locktest:<check>:<name>.
func (r *rig) key(name string) lockcore.Key {
	r.t.Helper()
	k, err := lockcore.NewKey("locktest", r.t.Name()[strings.LastIndexByte(r.t.Name(), '/')+1:], name)
	if err != nil {
		r.t.Fatal(err)
	}
	return k
}

// acquire takes k on e, failing the check on error. It must be called on
// the check's goroutine.
func (r *rig) acquire(e lifecycle.Locker, ctx context.Context, k lockcore.Key, p lifecycle.Policy) *lifecycle.Lease {
	r.t.Helper()
	ls, err := e.Acquire(ctx, k, p)
	if err != nil {
		r.t.Fatalf("Acquire(%v, %+v): %v", k, p, err)
	}
	return ls
}

// release releases ls, failing the check on error.
func (r *rig) release(ls *lifecycle.Lease) {
	r.t.Helper()
	if err := ls.Release(context.Background()); err != nil {
		r.t.Fatalf("Release of %v (fence %d): %v", ls.Key(), ls.Fence(), err)
	}
}

// wantBusy fails the check unless a fresh fail-fast acquisition of k on e
// fails with a *lockcore.ContentionError.
func (r *rig) wantBusy(e lifecycle.Locker, k lockcore.Key, what string) {
	r.t.Helper()
	ls, err := e.Acquire(r.ctx, k, failFast)
	if err == nil {
		_ = ls.Release(context.Background())
		r.t.Fatalf("%s: a fresh acquisition of %v got fence %d, want it held by another owner", what, k, ls.Fence())
	}
	var ce *lockcore.ContentionError
	if !errors.As(err, &ce) || !errors.Is(err, lockcore.ErrNotAcquired) {
		r.t.Fatalf("%s: a fresh acquisition of %v: %v, want a ContentionError", what, k, err)
	}
}

// wantFreed fails the check unless a fresh fail-fast acquisition of k on
// e succeeds within awaitBound (a release may reach the backend a moment
// after it returned); it returns the lease.
func (r *rig) wantFreed(e lifecycle.Locker, k lockcore.Key, what string) *lifecycle.Lease {
	r.t.Helper()
	var (
		ls  *lifecycle.Lease
		err error
	)
	if !r.eventually(func() bool {
		ls, err = e.Acquire(r.ctx, k, failFast)
		return err == nil
	}) {
		r.t.Fatalf("%s: %v not free within %v: %v", what, k, awaitBound, err)
	}
	return ls
}

// eventually asks cond until it reports true, at most for awaitBound, and
// reports whether it did.
func (r *rig) eventually(cond func() bool) bool {
	deadline := time.Now().Add(awaitBound)
	for i := 0; ; i++ {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			return false
		}
		time.Sleep(pollEvery) // a bounded poll of a state, not a synchronisation
	}
}

// queued waits until n acquisitions of k have reported that they wait
// (Events.Waiting(k, +1)).
func (r *rig) queued(k lockcore.Key, n int) {
	r.t.Helper()
	if err := r.ev.await(r.ctx, func(c map[lockcore.Key]*tally) bool { return c[k] != nil && c[k].queued >= n }); err != nil {
		r.t.Fatalf("%d acquisitions of %v never reported that they wait (have %+v): %v", n, k, r.ev.tally(k), err)
	}
}

// done waits until c is cancelled.
func (r *rig) done(c context.Context, what string) {
	r.t.Helper()
	select {
	case <-c.Done():
	case <-time.After(awaitBound):
		r.t.Fatalf("%s: context not cancelled within %v", what, awaitBound)
	}
}

// sections checks critical sections: that no two of them overlap while
// both their leases are certain, that a counter read and written apart
// (not atomically) inside them loses no update, and that the fencing
// tokens they hold rise in the order they enter. Its methods are safe for
// concurrent use.
type sections struct {
	mu       sync.Mutex
	inside   map[*lifecycle.Lease]bool
	fences   []int64
	overlaps []string
	counter  atomic.Int64
	n, lost  atomic.Int64
}

// enter starts a section under ls.
func (s *sections) enter(ls *lifecycle.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inside == nil {
		s.inside = make(map[*lifecycle.Lease]bool)
	}
	for other := range s.inside {
		if other.Err() == nil && ls.Err() == nil {
			s.overlaps = append(s.overlaps, fmt.Sprintf("fence %d entered while fence %d was inside", ls.Fence(), other.Fence()))
		}
	}
	s.inside[ls] = true
	s.fences = append(s.fences, ls.Fence())
}

// work is the section's work: a read-modify-write of the counter that only
// mutual exclusion keeps exact.
func (s *sections) work() {
	v := s.counter.Load()
	runtime.Gosched()
	s.counter.Store(v + 1)
}

// leave ends the section under ls.
func (s *sections) leave(ls *lifecycle.Lease) {
	if ls.Err() != nil {
		s.lost.Add(1)
	}
	s.n.Add(1)
	s.mu.Lock()
	delete(s.inside, ls)
	s.mu.Unlock()
}

// verify reports what went wrong; the fences' order, when ordered.
func (s *sections) verify(t *testing.T, want int, ordered bool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.n.Load(); n != int64(want) {
		t.Errorf("%d sections ran, want %d", n, want)
	}
	if len(s.overlaps) > 0 {
		t.Errorf("%d overlapping sections, first: %s", len(s.overlaps), s.overlaps[0])
	}
	if s.lost.Load() > 0 {
		t.Logf("%d leases were lost in their sections: counter and fence order not checked", s.lost.Load())
		return
	}
	if c := s.counter.Load(); c != s.n.Load() {
		t.Errorf("counter %d after %d sections: updates lost to overlapping sections", c, s.n.Load())
	}
	for i := 1; ordered && i < len(s.fences); i++ {
		if s.fences[i] <= s.fences[i-1] {
			t.Errorf("fence %d held after fence %d: fences do not rise in hold order", s.fences[i], s.fences[i-1])
			break
		}
	}
}

// run runs workers goroutines that each take k count times with ctx from
// ctxOf and p, on the engines in turn, each time in a section.
func (s *sections) run(r *rig, k lockcore.Key, workers, count int, ctxOf func() context.Context, p lifecycle.Policy) {
	var wg sync.WaitGroup
	for i := range workers {
		e := r.a
		if i%2 == 1 {
			e = r.b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range count {
				ls, err := e.Acquire(ctxOf(), k, p)
				if err != nil {
					r.t.Errorf("Acquire: %v", err)
					return
				}
				s.enter(ls)
				s.work()
				s.leave(ls)
				if err := ls.Release(context.Background()); err != nil {
					r.t.Errorf("Release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// checkExclusion: goroutines on two engines take one key many times; no
// two sections overlap, a counter updated inside them stays exact, and
// fences rise in hold order.
func checkExclusion(r *rig) {
	const workers, count = 8, 25
	var s sections
	s.run(r, r.key("k"), workers, count, func() context.Context { return r.ctx }, lifecycle.Policy{Wait: checkBound})
	s.verify(r.t, workers*count, r.orderedFences())
}

// checkFIFO: waiters queued one after another behind a hold get the lock in
// the order they queued. An engine that hands holds over in memory
// (Promises.LocalHandOvers n > 0) serves the waiters of the releasing
// engine first, at most n in a row, and the others in the order they
// queued: the order is that model's.
func checkFIFO(r *rig) {
	n := r.promised.LocalHandOvers
	// Waiters alternate between the engines, the holder's second; enough
	// of them that the holder's engine reaches its bound.
	count := 3
	if n > 0 {
		count = 2*n + 3
	}
	engines := []int{0}
	for i := 1; i <= count; i++ {
		engines = append(engines, i%2)
	}
	want := fifoOrder(engines, n)
	k := r.key("k")
	holder := r.acquire(r.a, r.ctx, k, failFast)
	order := make(chan int, count)
	for i := 1; i <= count; i++ {
		e := []lifecycle.Locker{r.a, r.b}[i%2]
		go func() {
			ls, err := e.Acquire(r.ctx, k, lifecycle.Policy{Wait: checkBound})
			if err != nil {
				r.t.Errorf("waiter %d: %v", i, err)
				order <- -i
				return
			}
			order <- i // before the release: the next waiter gets the lock after it
			_ = ls.Release(context.Background())
		}()
		r.queued(k, i)
	}
	r.release(holder)
	var got []int
	for range count {
		select {
		case i := <-order:
			got = append(got, i)
		case <-time.After(awaitBound):
			r.t.Fatalf("waiters served so far %v; the others never got the lock", got)
		}
	}
	if !slices.Equal(got, want) {
		r.t.Fatalf("waiters served in order %v, want %v (queued in order 1 to %d; in-memory hand-overs in a row %d)", got, want, count, n)
	}
}

// fifoOrder returns the order in which waiters 1, 2, ... are served, by
// an engine that hands a hold over in memory at most n times in a row:
// engines[0] is the holder's engine, engines[i] waiter i's. A release
// goes to the longest waiting waiter of the releasing engine while fewer
// than n hand-overs in memory made the hold, else to the longest waiting
// of all, whose hold then starts a new run.
func fifoOrder(engines []int, n int) []int {
	var queue, out []int
	for i := 1; i < len(engines); i++ {
		queue = append(queue, i)
	}
	cur, run := engines[0], 0
	for len(queue) > 0 {
		next := 0
		if run < n {
			if j := slices.IndexFunc(queue, func(i int) bool { return engines[i] == cur }); j >= 0 {
				next, run = j, run+1
			} else {
				run = 0
			}
		} else {
			run = 0
		}
		i := queue[next]
		out = append(out, i)
		queue = slices.Delete(queue, next, next+1)
		cur = engines[i]
	}
	return out
}

// checkInMemoryReentry: a context that holds a key re-enters it on the same
// engine, with the same fence and token; the hold lasts until its last
// lease is released, and is one hold for Events.
func checkInMemoryReentry(r *rig) {
	k := r.key("k")
	outer := r.acquire(r.a, r.ctx, k, failFast)
	inner := r.acquire(r.a, outer.Context(), k, failFast)
	if !inner.Reentered() || outer.Reentered() {
		r.t.Fatalf("Reentered: inner %v, outer %v; want true, false", inner.Reentered(), outer.Reentered())
	}
	if inner.Fence() != outer.Fence() || inner.Token() != outer.Token() {
		r.t.Fatalf("re-entry has fence %d, want the outer %d (and its token)", inner.Fence(), outer.Fence())
	}
	r.release(outer)
	r.wantBusy(r.b, k, "outer released, inner not")
	if err := inner.Err(); err != nil {
		r.t.Fatalf("inner lease after the outer's release: %v", err)
	}
	r.release(inner)
	r.release(r.wantFreed(r.b, k, "both released"))
	r.wantEnded(k, 2, lockcore.ErrReleased) // the re-entered hold, and wantFreed's
}

// wantEnded fails the check unless Events.Ended was told, by now or within
// awaitBound, exactly n times for k, each with a cause matching cause.
func (r *rig) wantEnded(k lockcore.Key, n int, cause error) {
	r.t.Helper()
	_ = r.ev.await(r.ctx, func(c map[lockcore.Key]*tally) bool { return c[k] != nil && len(c[k].ended) >= n })
	got := r.ev.tally(k).ended
	if len(got) != n {
		r.t.Fatalf("Events.Ended told %d times for %v (%v), want %d", len(got), k, got, n)
	}
	for _, c := range got {
		if !errors.Is(c, cause) {
			r.t.Fatalf("Events.Ended with cause %v, want %v", c, cause)
		}
	}
}

// checkTokenReentry: the owner token of a hold, propagated to another
// engine (another process), re-enters the hold there with the same fence:
// Reentered, but not in memory, since it is a hold of its own for Events;
// the key is free only when both are released.
func checkTokenReentry(r *rig) {
	k := r.key("k")
	first := r.acquire(r.a, r.ctx, k, failFast)
	ctx2 := r.carried(first.Context())
	second := r.acquire(r.b, ctx2, k, failFast)
	if second.Fence() != first.Fence() || second.Token() != first.Token() || !second.Reentered() || second.ReenteredInMemory() {
		r.t.Fatalf("token re-entry: fence %d, reentered %v (in memory %v); want fence %d, reentered, not in memory",
			second.Fence(), second.Reentered(), second.ReenteredInMemory(), first.Fence())
	}
	r.release(first)
	r.wantBusy(r.a, k, "first released, token re-entry not")
	r.release(second)
	r.release(r.wantFreed(r.a, k, "both released"))
	r.wantEnded(k, 3, lockcore.ErrReleased)
}

// checkTokenGrantsNothing: a token nobody holds with gets nothing: not a
// held key, not its own name on a free key, and after a release the old
// owner's token re-enters nothing; requests sharing a made-up token still
// exclude each other.
func checkTokenGrantsNothing(r *rig) {
	k := r.key("k")
	made := lifecycle.NewToken()
	madeUp, err := lifecycle.Intake(r.ctx, "made-up token", []string{made}, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	holder := r.acquire(r.a, r.ctx, k, failFast)
	if ls, err := r.b.Acquire(madeUp, k, failFast); err == nil {
		_ = ls.Release(context.Background())
		r.t.Fatal("a made-up token entered a held key")
	} else if !errors.Is(err, lockcore.ErrNotAcquired) {
		r.t.Fatalf("a made-up token on a held key: %v, want ErrNotAcquired", err)
	}
	stale := r.carried(holder.Context())
	r.release(holder)

	free := r.key("free")
	ls := r.acquire(r.b, madeUp, free, failFast)
	if ls.Token() == made {
		r.t.Fatal("a free key was taken under the caller's made-up token, not a fresh one")
	}
	r.wantBusy(r.a, free, "a hold taken with a made-up token")
	r.release(ls)

	other := r.acquire(r.a, r.ctx, k, failFast)
	if ls, err := r.b.Acquire(stale, k, failFast); err == nil {
		_ = ls.Release(context.Background())
		r.t.Fatal("the token of a released hold re-entered the key's next hold")
	}
	r.release(other)

	var s sections
	s.run(r, r.key("shared"), 10, 1, func() context.Context { return madeUp }, lifecycle.Policy{Wait: checkBound})
	s.verify(r.t, 10, r.orderedFences())
}

// checkPolicy: a zero key and a TTL below 30ms are refused and hold
// nothing, matching ErrMisconfigured, as a negative wait other than
// FailFast is; the zero Policy waits; a Wait of lockcore.FailFast fails at
// once; a Wait runs out when it says,
// and the context's deadline ends a wait first.
func checkPolicy(r *rig) {
	k := r.key("k")
	if _, err := r.a.Acquire(r.ctx, lockcore.Key{}, failFast); !errors.Is(err, lockcore.ErrInvalidKey) {
		r.t.Fatalf("zero Key: %v, want ErrInvalidKey", err)
	}
	for _, p := range []lifecycle.Policy{{Wait: lockcore.FailFast, TTL: time.Millisecond}, {Wait: -2 * time.Second}} {
		if ls, err := r.a.Acquire(r.ctx, k, p); !errors.Is(err, lockcore.ErrMisconfigured) {
			if err == nil {
				_ = ls.Release(context.Background())
			}
			r.t.Fatalf("Policy %+v: %v, want ErrMisconfigured", p, err)
		}
	}
	// What the engine does not promise it refuses, rather than serve it
	// as something else (a shared hold as an exclusive one).
	for _, c := range []struct {
		share    int
		promised bool
	}{{lifecycle.ShareAll, r.promised.Shared}, {2, r.promised.Permits}} {
		if c.promised {
			continue
		}
		p := lifecycle.Policy{Wait: lockcore.FailFast, Share: c.share}
		if ls, err := r.a.Acquire(r.ctx, k, p); !errors.Is(err, lockcore.ErrMisconfigured) {
			if err == nil {
				_ = ls.Release(context.Background())
			}
			r.t.Fatalf("Share %d from an engine that does not promise it: %v, want ErrMisconfigured", c.share, err)
		}
	}
	holder := r.acquire(r.a, r.ctx, k, failFast) // nothing was held by the refusals

	// The zero Policy waits (5 seconds): here until the context's deadline.
	start := time.Now() // before the deadline is set: a pause between the two must not shorten the wait seen
	zctx, zcancel := context.WithTimeout(r.ctx, 150*time.Millisecond)
	_, err := r.b.Acquire(zctx, k, lifecycle.Policy{})
	zcancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 100*time.Millisecond {
		r.t.Fatalf("the zero Policy on a held key: %v after %v, want a wait ended by the context's deadline", err, time.Since(start))
	}

	start = time.Now()
	_, err = r.b.Acquire(r.ctx, k, failFast)
	var ce *lockcore.ContentionError
	if !errors.As(err, &ce) || ce.TimedOut || errors.Is(err, lockcore.ErrWaitTimeout) {
		r.t.Fatalf("FailFast on a held key: %v, want a ContentionError that did not time out", err)
	}
	if d := time.Since(start); d > time.Second {
		r.t.Errorf("FailFast took %v to fail", d)
	}

	const wait = 200 * time.Millisecond
	start = time.Now()
	_, err = r.b.Acquire(r.ctx, k, lifecycle.Policy{Wait: wait})
	d := time.Since(start)
	if !errors.As(err, &ce) || !ce.TimedOut || !errors.Is(err, lockcore.ErrWaitTimeout) {
		r.t.Fatalf("Wait %v on a held key: %v, want a ContentionError that timed out", wait, err)
	}
	if d < wait || d > wait+time.Second {
		r.t.Errorf("Wait %v ran out after %v", wait, d)
	}

	ctx, cancel := context.WithTimeout(r.ctx, 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = r.b.Acquire(ctx, k, lifecycle.Policy{Wait: 10 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lockcore.ErrNotAcquired) {
		r.t.Fatalf("a deadline before the Wait: %v, want DeadlineExceeded and ErrNotAcquired", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		r.t.Errorf("a 100ms deadline ended the wait after %v", d)
	}
	r.release(holder)
}

// checkWithdrawal: a waiter whose context ends returns its error, holds
// nothing and leaves the line: after the holder's release the key is free
// for others (a grant to the departed waiter passes on).
func checkWithdrawal(r *rig) {
	k := r.key("k")
	holder := r.acquire(r.a, r.ctx, k, failFast)
	ctx, cancel := context.WithCancel(r.ctx)
	res := make(chan error, 1)
	go func() {
		ls, err := r.b.Acquire(ctx, k, lifecycle.Policy{Wait: checkBound})
		if err == nil {
			_ = ls.Release(context.Background())
		}
		res <- err
	}()
	r.queued(k, 1)
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, lockcore.ErrNotAcquired) {
			r.t.Fatalf("a waiter whose context was cancelled: %v, want Canceled and ErrNotAcquired", err)
		}
	case <-time.After(awaitBound):
		r.t.Fatal("a waiter whose context was cancelled did not return")
	}
	if op, ok := r.ea.(lockcore.Operator); ok {
		var info lockcore.Info
		if !r.eventually(func() bool { info, _ = op.Inspect(r.ctx, k); return len(info.Waiters) == 0 }) {
			r.t.Fatalf("the departed waiter is still in line: %+v", info.Waiters)
		}
	}
	r.release(holder)
	r.release(r.wantFreed(r.a, k, "holder released after its waiter left"))
}

// checkLossThroughContext: a hold taken away (Operator.Revoke) ends its
// lease's context, and those derived from it, with cause ErrRevoked; the
// lease reports the loss; Events is told once, with that cause, by the time
// Release returns ErrLockLost.
func checkLossThroughContext(r *rig) {
	k := r.key("k")
	ls := r.acquire(r.a, r.ctx, k, failFast)
	nested, cancel := context.WithCancel(ls.Context())
	defer cancel()
	if _, err := r.eb.(lockcore.Operator).Revoke(r.ctx, k, "locktest: taken away"); err != nil {
		r.t.Fatalf("Revoke: %v", err)
	}
	r.done(ls.Context(), "revoked lease")
	for _, c := range []context.Context{ls.Context(), nested} {
		if cause := context.Cause(c); !errors.Is(cause, lockcore.ErrRevoked) || !errors.Is(cause, lockcore.ErrLockLost) {
			r.t.Fatalf("cause %v, want ErrRevoked", cause)
		}
	}
	if err := ls.Err(); !errors.Is(err, lockcore.ErrLockLost) {
		r.t.Fatalf("Err of a revoked lease: %v, want ErrLockLost", err)
	}
	for _, h := range lifecycle.HeldFrom(nested) {
		if h.Key == k {
			r.t.Fatal("a context derived from a revoked lease still holds its key")
		}
	}
	if err := ls.Release(context.Background()); !errors.Is(err, lockcore.ErrLockLost) {
		r.t.Fatalf("Release of a revoked lease: %v, want ErrLockLost", err)
	}
	if got := r.ev.tally(k).ended; len(got) != 1 || !errors.Is(got[0], lockcore.ErrRevoked) {
		r.t.Fatalf("Events.Ended by the return of Release: %v, want once with ErrRevoked", got)
	}
}

// checkMaxHold: a hold with a MaxHold ends when it has lasted that long,
// though its leases are never released: their contexts (the re-entered
// one's too) are cancelled with a cause matching ErrMaxHold and
// ErrLockLost, Events.Ended is told so, and the hold is released in the
// backend, so that the other engine's waiter gets the lock, with a greater
// fence, long before the hold's TTL would have run out; the leases'
// Release then report the cause.
func checkMaxHold(r *rig) {
	const ceiling = 300 * time.Millisecond
	k := r.key("k")
	start := time.Now()
	ls := r.acquire(r.a, r.ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 20 * time.Second, MaxHold: ceiling})
	in := r.acquire(r.a, ls.Context(), k, failFast)
	type result struct {
		ls  *lifecycle.Lease
		err error
		at  time.Duration // since start
	}
	waited := make(chan result, 1)
	go func() {
		w, err := r.b.Acquire(r.ctx, k, lifecycle.Policy{Wait: 15 * time.Second})
		waited <- result{w, err, time.Since(start)}
	}()
	r.t.Cleanup(func() { // a check that failed early leaves nothing held
		select {
		case got := <-waited:
			if got.ls != nil {
				_ = got.ls.Release(context.Background())
			}
		default: // still waiting: the check's context ends next, and so does the wait
		}
	})
	// The waiter reports that it waits, or, on an engine that does not
	// queue it yet (the Redis engine before its subscription is up, on a
	// loaded machine), returns once the hold ended: never before.
	var early *result // the waiter's, when it returned before the hold was seen ending
	qctx, stop := context.WithCancel(r.ctx)
	queued := make(chan error, 1)
	go func() {
		queued <- r.ev.await(qctx, func(c map[lockcore.Key]*tally) bool { return c[k] != nil && c[k].queued >= 1 })
	}()
	select {
	case err := <-queued:
		if err != nil {
			r.t.Fatalf("the waiter neither reported that it waits nor returned (have %+v): %v", r.ev.tally(k), err)
		}
		select {
		case got := <-waited:
			early = &got // the check was slow to see it queued: a loaded machine
		default:
		}
	case got := <-waited:
		early = &got
	}
	stop()
	if early != nil && early.at < ceiling {
		if early.ls != nil {
			_ = early.ls.Release(context.Background())
		}
		r.t.Fatalf("the waiter returned %v after a hold with MaxHold %v began (%v)", early.at, ceiling, early.err)
	}
	r.done(ls.Context(), "a hold past its MaxHold")
	if held := time.Since(start); held < ceiling {
		r.t.Fatalf("a hold with MaxHold %v ended after %v", ceiling, held)
	}
	for _, c := range []context.Context{ls.Context(), in.Context()} {
		if cause := context.Cause(c); !errors.Is(cause, lockcore.ErrMaxHold) || !errors.Is(cause, lockcore.ErrLockLost) {
			r.t.Fatalf("cause %v, want ErrMaxHold", cause)
		}
	}
	var w *lifecycle.Lease
	if early == nil {
		select {
		case got := <-waited:
			early = &got
		case <-time.After(awaitBound):
			r.t.Fatalf("the waiter did not get the lock within %v of the hold's MaxHold", awaitBound)
		}
	}
	if early.err != nil {
		r.t.Fatalf("the waiter: %v", early.err)
	}
	w = early.ls
	if r.orderedFences() && w.Fence() <= ls.Fence() {
		r.t.Errorf("the waiter's fence %d, not above the ended hold's %d", w.Fence(), ls.Fence())
	}
	for _, l := range []*lifecycle.Lease{in, ls} {
		if err := l.Release(context.Background()); !errors.Is(err, lockcore.ErrMaxHold) {
			r.t.Errorf("Release of a lease past its MaxHold: %v, want ErrMaxHold", err)
		}
	}
	r.release(w)
	_ = r.ev.await(r.ctx, func(c map[lockcore.Key]*tally) bool { return c[k] != nil && len(c[k].ended) >= 2 })
	if got := r.ev.tally(k).ended; len(got) != 2 || !errors.Is(got[0], lockcore.ErrMaxHold) || !errors.Is(got[1], lockcore.ErrReleased) {
		r.t.Fatalf("Events.Ended: %v, want ErrMaxHold, then ErrReleased", got)
	}
}

// checkFencingOrder: fences rise across fresh holds of a key on either
// engine, also after it was free, and past a revocation's NewFence; a
// re-entry shares the fence of its hold.
func checkFencingOrder(r *rig) {
	k := r.key("k")
	var last int64
	next := func(ls *lifecycle.Lease, what string) {
		r.t.Helper()
		if ls.Fence() <= last {
			r.t.Fatalf("%s: fence %d, not above the earlier %d", what, ls.Fence(), last)
		}
		last = ls.Fence()
	}
	for i := range 6 {
		e := []lifecycle.Locker{r.a, r.b}[i%2]
		ls := r.acquire(e, r.ctx, k, failFast)
		next(ls, fmt.Sprintf("hold %d", i+1))
		in := r.acquire(e, ls.Context(), k, failFast)
		if in.Fence() != ls.Fence() {
			r.t.Fatalf("re-entry fence %d, want its hold's %d", in.Fence(), ls.Fence())
		}
		r.release(in)
		r.release(ls)
	}
	op, ok := r.ea.(lockcore.Operator)
	if !ok {
		return
	}
	ls := r.acquire(r.b, r.ctx, k, failFast)
	next(ls, "before the revocation")
	rev, err := op.Revoke(r.ctx, k, "locktest: fencing")
	if err != nil {
		r.t.Fatalf("Revoke: %v", err)
	}
	if rev.Fence != ls.Fence() || rev.NewFence <= rev.Fence {
		r.t.Fatalf("Revocation fences %d → %d for the hold of fence %d; want NewFence above it", rev.Fence, rev.NewFence, ls.Fence())
	}
	_ = ls.Release(context.Background())
	after := r.wantFreed(r.a, k, "after the revocation")
	if after.Fence() <= rev.NewFence {
		r.t.Fatalf("fence %d after a revocation to %d", after.Fence(), rev.NewFence)
	}
	r.release(after)
}

// checkRelease: a lease is released once; after that its Err and its
// context's cause say ErrReleased, and a second Release returns it.
func checkRelease(r *rig) {
	k := r.key("k")
	ls := r.acquire(r.a, r.ctx, k, failFast)
	r.release(ls)
	if err := ls.Release(context.Background()); !errors.Is(err, lockcore.ErrReleased) {
		r.t.Fatalf("second Release: %v, want ErrReleased", err)
	}
	if err := ls.Err(); !errors.Is(err, lockcore.ErrReleased) {
		r.t.Fatalf("Err after Release: %v, want ErrReleased", err)
	}
	if cause := context.Cause(ls.Context()); !errors.Is(cause, lockcore.ErrReleased) {
		r.t.Fatalf("the lease's context after Release: cause %v, want ErrReleased", cause)
	}
	r.release(r.wantFreed(r.b, k, "released"))
}

// checkEvents: Waiting is told +1 and -1 once per wait, Woken at least
// once for a wait granted or run out, and Ended once per fresh hold, with
// cause ErrReleased, not for an in-memory re-entry.
func checkEvents(r *rig) {
	k := r.key("k")
	holder := r.acquire(r.a, r.ctx, k, failFast)
	granted := make(chan *lifecycle.Lease, 1)
	go func() {
		ls, err := r.b.Acquire(r.ctx, k, lifecycle.Policy{Wait: checkBound})
		if err != nil {
			r.t.Errorf("waiter: %v", err)
		}
		granted <- ls
	}()
	r.queued(k, 1)
	if _, err := r.a.Acquire(r.ctx, k, lifecycle.Policy{Wait: 50 * time.Millisecond}); !errors.Is(err, lockcore.ErrWaitTimeout) {
		r.t.Fatalf("a short wait: %v, want ErrWaitTimeout", err)
	}
	if got := r.ev.tally(k); got.queued != 2 || got.woken < 1 {
		r.t.Fatalf("after a wait ran out: %+v, want 2 waits and a wake", got)
	}
	r.release(holder)
	ls := <-granted
	if ls == nil {
		r.t.FailNow()
	}
	in := r.acquire(r.b, ls.Context(), k, failFast)
	r.release(in)
	r.release(ls)
	r.wantEnded(k, 2, lockcore.ErrReleased)
	got := r.ev.tally(k)
	if got.queued != 2 || got.waiting != 0 || got.negative || got.woken < 2 {
		r.t.Fatalf("events %+v; want Waiting +1 and -1 twice and a wake per wait", got)
	}
}

// checkOperator: Inspect shows a free key as free and a held one with one
// holder named without its token; List lists in key order up to a limit;
// Revoke refuses a free key and a bad reason, grants the next waiter past
// NewFence and is in the audit.
func checkOperator(r *rig) {
	opA, opB := r.ea.(lockcore.Operator), r.eb.(lockcore.Operator)
	k := r.key("k")
	info, err := opA.Inspect(r.ctx, k)
	if err != nil || info.Key != k.String() || (len(info.Holders) > 0) || info.Fence != 0 || len(info.Waiters) != 0 {
		r.t.Fatalf("Inspect of a free key: %+v, %v", info, err)
	}
	holder := r.acquire(r.a, r.ctx, k, failFast)
	entry := r.acquire(r.b, r.carried(holder.Context()), k, failFast)
	var owner string
	for _, op := range []lockcore.Operator{opA, opB} {
		info, err := op.Inspect(r.ctx, k)
		if err != nil || len(info.Holders) != 1 || info.Fence != holder.Fence() || info.Holders[0].Count != 2 {
			r.t.Fatalf("Inspect of a key held twice by one owner: %+v, %v", info, err)
		}
		if owner == "" {
			owner = info.Holders[0].Owner
		}
		if o := info.Holders[0].Owner; o == "" || o != owner {
			r.t.Fatalf("owner %q, want one non-empty name for one owner (%q)", o, owner)
		}
		if strings.Contains(fmt.Sprintf("%#v", info), holder.Token()) {
			r.t.Fatal("Inspect shows the owner token")
		}
	}
	r.release(entry)

	names := []string{"l1", "l2", "l3"}
	for _, n := range names {
		ls := r.acquire(r.a, r.ctx, r.key(n), failFast)
		defer func() {
			if err := ls.Release(context.Background()); err != nil {
				r.t.Errorf("Release of %v: %v", ls.Key(), err)
			}
		}()
	}
	prefix := r.key("l").String() // the keys l1, l2 and l3 only
	all, more, err := opB.List(r.ctx, prefix, 0)
	if err != nil || more || len(all) != 3 {
		r.t.Fatalf("List(%q, 0): %d locks, more %v, %v; want 3", prefix, len(all), more, err)
	}
	for i, n := range names {
		if all[i].Key != r.key(n).String() || len(all[i].Holders) == 0 {
			r.t.Fatalf("List: %d: %+v, want %v held, in key order", i, all[i], r.key(n))
		}
	}
	two, more, err := opB.List(r.ctx, prefix, 2)
	if err != nil || !more || len(two) != 2 || two[1].Key != all[1].Key {
		r.t.Fatalf("List(%q, 2): %d locks, more %v, %v; want the first 2 and more", prefix, len(two), more, err)
	}

	if _, err := opA.Revoke(r.ctx, r.key("free"), "locktest"); !errors.Is(err, lockcore.ErrNotHeld) {
		r.t.Fatalf("Revoke of a free key: %v, want ErrNotHeld", err)
	}
	if _, err := opA.Revoke(r.ctx, k, ""); !errors.Is(err, lockcore.ErrInvalidReason) {
		r.t.Fatalf("Revoke with an empty reason: %v, want ErrInvalidReason", err)
	}
	granted := make(chan *lifecycle.Lease, 1)
	go func() {
		ls, err := r.b.Acquire(r.ctx, k, lifecycle.Policy{Wait: checkBound})
		if err != nil {
			r.t.Errorf("waiter: %v", err)
		}
		granted <- ls
	}()
	r.queued(k, 1)
	rev, err := opB.Revoke(r.ctx, k, "locktest: operator")
	if err != nil {
		r.t.Fatalf("Revoke: %v", err)
	}
	if rev.Key != k.String() || rev.Owner != owner || rev.Fence != holder.Fence() || rev.NewFence <= rev.Fence || rev.Reason != "locktest: operator" {
		r.t.Fatalf("Revocation %+v; want key %v, owner %q, fence %d, NewFence above it", rev, k, owner, holder.Fence())
	}
	var next *lifecycle.Lease
	select {
	case next = <-granted:
	case <-time.After(awaitBound):
		r.t.Fatal("the waiter was not granted the revoked lock")
	}
	if next == nil {
		r.t.FailNow()
	}
	if next.Fence() <= rev.NewFence {
		r.t.Fatalf("the waiter's fence %d, not above NewFence %d", next.Fence(), rev.NewFence)
	}
	info, err = opA.Inspect(r.ctx, k)
	if err != nil || len(info.Audit) == 0 || info.Audit[0].Reason != rev.Reason || info.Audit[0].Fence != rev.Fence {
		r.t.Fatalf("audit after Revoke: %+v, %v", info.Audit, err)
	}
	_ = holder.Release(context.Background())
	r.release(next)
}

// checkClose: closing an engine fails its waiters with ErrClosed, ends its
// leases, and refuses later acquisitions.
func checkClose(r *rig) {
	k, mine := r.key("k"), r.key("mine")
	other := r.acquire(r.b, r.ctx, k, failFast)
	ls := r.acquire(r.a, r.ctx, mine, failFast)
	res := make(chan error, 1)
	go func() {
		ls, err := r.a.Acquire(r.ctx, k, lifecycle.Policy{Wait: checkBound})
		if err == nil {
			_ = ls.Release(context.Background())
		}
		res <- err
	}()
	r.queued(k, 1)
	if err := r.ea.(interface{ Close() error }).Close(); err != nil {
		r.t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, lockcore.ErrClosed) {
			r.t.Fatalf("a waiter of a closed engine: %v, want ErrClosed", err)
		}
	case <-time.After(awaitBound):
		r.t.Fatal("a waiter of a closed engine did not return")
	}
	r.done(ls.Context(), "a lease of a closed engine")
	if cause := context.Cause(ls.Context()); !errors.Is(cause, lockcore.ErrLockLost) && !errors.Is(cause, lockcore.ErrClosed) {
		r.t.Fatalf("a lease of a closed engine ended with %v, want ErrLockLost or ErrClosed", cause)
	}
	_ = ls.Release(context.Background())
	if _, err := r.a.Acquire(r.ctx, r.key("later"), failFast); !errors.Is(err, lockcore.ErrClosed) {
		r.t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	if sameEngine(r.ea, r.eb) || !reflect.ValueOf(r.ea).Comparable() && other.Err() != nil {
		// One engine plays both (or, for engine values that cannot be
		// compared, one backend, which Close ended): its other hold is
		// lost too.
		r.done(other.Context(), "another lease of the closed engine")
		return
	}
	r.release(other)
}

// carried is r.ctx with the owner tokens of from, as the next service gets
// them across a hop (lifecycle.Outbound, then lifecycle.Intake).
func (r *rig) carried(from context.Context) context.Context {
	ctx, err := lifecycle.Intake(r.ctx, "Routelock-Token", []string{lifecycle.Outbound(from)}, nil)
	if err != nil {
		r.t.Fatalf("the tokens did not cross the hop: %v", err)
	}
	return ctx
}

// sameEngine reports whether a and b are one engine value; values that
// cannot be compared are not.
func sameEngine(a, b lockcore.Engine) bool {
	return reflect.ValueOf(a).Comparable() && a == b
}
