package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// The checks of shared holds (lock.Policy.Share).

// shared is a Policy of a reader that waits; permits(n) one of n permits.
var shared = lifecycle.Policy{Wait: checkBound, Share: lifecycle.ShareAll}

func permits(n int) lifecycle.Policy { return lifecycle.Policy{Wait: checkBound, Share: n} }

// engines returns four engines on the check's backend: a, b and two more,
// as four processes of one service.
func (r *rig) engines() []lifecycle.Locker {
	return []lifecycle.Locker{r.a, r.b, r.another(), r.another()}
}

// holders checks the sections of shared and exclusive holds of one key:
// no exclusive section overlaps any other, no more shared ones are inside
// at once than the fewest permits among them, the slots of the shared
// ones inside are distinct and below their n, and fences rise: an
// exclusive hold's above every fence seen before it entered, a shared
// one's above every exclusive one's before it. Its methods are safe for
// concurrent use.
type holders struct {
	mu         sync.Mutex
	inside     map[*lifecycle.Lease]int // the lease's Share
	fences     map[int64]bool           // fresh holds' fences, to find one handed out twice
	top, topX  int64                    // the greatest fence entered, of any hold and of an exclusive one
	most       int                      // the most shared sections inside at once
	errs       []string
	exclusives atomic.Int64
	counter    atomic.Int64 // changed only inside exclusive sections
	unordered  bool         // the engine does not promise lockcore.OrderedFences
}

func (s *holders) enter(ls *lifecycle.Lease, share int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inside == nil {
		s.inside, s.fences = make(map[*lifecycle.Lease]int), make(map[int64]bool)
	}
	fail := func(format string, args ...any) {
		s.errs = append(s.errs, fmt.Sprintf("fence %d (share %d): ", ls.Fence(), share)+fmt.Sprintf(format, args...))
	}
	if ls.Err() != nil {
		fail("lost on entry")
	}
	if s.fences[ls.Fence()] && !s.unordered {
		fail("a fence handed out before")
	}
	s.fences[ls.Fence()] = true
	slot, hasSlot := ls.Slot()
	switch {
	case share > 0 && (!hasSlot || slot < 0 || slot >= share):
		fail("slot %d (%v), want one of 0..%d", slot, hasSlot, share-1)
	case share <= 0 && hasSlot:
		fail("a slot %d for a hold without permits", slot)
	}
	if share != 0 != ls.Shared() {
		fail("Lease.Shared %v", ls.Shared())
	}
	n := 0
	for other, os := range s.inside {
		if other.Err() != nil {
			continue // lost: no longer excludes anyone
		}
		switch {
		case share == 0 || os == 0:
			fail("entered while fence %d (share %d) was inside", other.Fence(), os)
		case share > 0 && os > 0:
			if o, _ := other.Slot(); o == slot {
				fail("slot %d, which fence %d inside has too", slot, other.Fence())
			}
		}
		n++
	}
	if share > 0 && n >= share {
		fail("entered with %d others inside, %d permits", n, share)
	}
	if !s.unordered && (share == 0 && ls.Fence() <= s.top || share != 0 && ls.Fence() <= s.topX) {
		fail("not above the fences entered before it (all %d, exclusive %d)", s.top, s.topX)
	}
	s.top = max(s.top, ls.Fence())
	if share == 0 {
		s.topX = ls.Fence()
		s.exclusives.Add(1)
	} else {
		s.most = max(s.most, n+1)
	}
	s.inside[ls] = share
}

func (s *holders) leave(ls *lifecycle.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inside, ls)
}

// work is a section's work: a read-modify-write of the counter, which only
// exclusive sections keep exact, in an exclusive section; a yield in a
// shared one, to let others in.
func (s *holders) work(share int) {
	if share != 0 {
		runtime.Gosched()
		return
	}
	v := s.counter.Load()
	runtime.Gosched()
	s.counter.Store(v + 1)
}

func (s *holders) verify(r *rig) {
	r.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) > 0 {
		r.t.Errorf("%d violations, first: %s", len(s.errs), s.errs[0])
	}
	if c, x := s.counter.Load(), s.exclusives.Load(); c != x {
		r.t.Errorf("counter %d after %d exclusive sections: updates lost", c, x)
	}
}

// run runs 64 goroutines over r's four engines that each take k count
// times, the Policy of goroutine i being policy(i), each hold in a section.
func (s *holders) run(r *rig, k lockcore.Key, count int, policy func(i int) lifecycle.Policy) {
	engines := r.engines()
	var wg sync.WaitGroup
	for i := range 64 {
		e, p := engines[i%len(engines)], policy(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range count {
				ls, err := e.Acquire(r.ctx, k, p)
				if err != nil {
					r.t.Errorf("Acquire(%+v): %v", p, err)
					return
				}
				s.enter(ls, p.Share)
				s.work(p.Share)
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

// checkShared: readers share a key and a writer excludes them all, one by
// one and under load; a reader does not pass a queued writer, and a
// writer queued behind readers gets the key before readers that queued
// after it.
func checkShared(r *rig) {
	k := r.key("k")
	r1 := r.acquire(r.a, r.ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, Share: lifecycle.ShareAll})
	r2 := r.acquire(r.b, r.ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, Share: lifecycle.ShareAll})
	if r.orderedFences() && r1.Fence() == r2.Fence() || !r1.Shared() || !r2.Shared() {
		r.t.Fatalf("two readers: fences %d and %d, shared %v %v; want distinct fences, both shared", r1.Fence(), r2.Fence(), r1.Shared(), r2.Shared())
	}
	r.wantBusy(r.b, k, "a writer beside two readers")
	// A writer queues behind the readers; a reader after it does not pass
	// it, neither failing fast nor waiting.
	writer := r.later(r.a, k, lifecycle.Policy{Wait: checkBound})
	r.queued(k, 1)
	if ls, err := r.b.Acquire(r.ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, Share: lifecycle.ShareAll}); err == nil {
		_ = ls.Release(context.Background())
		r.t.Fatalf("a reader passed a queued writer")
	}
	reader := r.later(r.b, k, shared)
	r.queued(k, 2)
	r.release(r1)
	select {
	case got := <-writer:
		r.t.Fatalf("the writer got the key while a reader held it (%v)", got.err)
	case got := <-reader:
		r.t.Fatalf("a reader that queued after a writer got the key first (%v)", got.err)
	default:
	}
	r.release(r2)
	var w *lifecycle.Lease
	select {
	case got := <-writer:
		if got.err != nil {
			r.t.Fatalf("the writer: %v", got.err)
		}
		w = got.ls
	case got := <-reader:
		r.t.Fatalf("a reader that queued after a writer got the key first (%v)", got.err)
	case <-time.After(awaitBound):
		r.t.Fatalf("the writer did not get the key within %v of the readers' release", awaitBound)
	}
	if w.Shared() || r.orderedFences() && w.Fence() <= max(r1.Fence(), r2.Fence()) {
		r.t.Fatalf("the writer: shared %v, fence %d after readers' %d and %d", w.Shared(), w.Fence(), r1.Fence(), r2.Fence())
	}
	r.release(w)
	select {
	case got := <-reader:
		if got.err != nil {
			r.t.Fatalf("the late reader: %v", got.err)
		}
		ls := got.ls
		if r.orderedFences() && ls.Fence() <= w.Fence() {
			r.t.Errorf("the late reader's fence %d, not above the writer's %d", ls.Fence(), w.Fence())
		}
		r.release(ls)
	case <-time.After(awaitBound):
		r.t.Fatalf("the late reader did not get the key within %v of the writer's release", awaitBound)
	}

	// A writer that gives up lets the readers queued behind it in, while
	// the reader ahead of it still holds.
	r0 := r.acquire(r.a, r.ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, Share: lifecycle.ShareAll})
	gaveUp := r.later(r.b, k, lifecycle.Policy{Wait: 300 * time.Millisecond})
	r.queued(k, 3) // the writer, after the two of above
	behind := r.later(r.a, k, shared)
	r.queued(k, 4)
	select {
	case got := <-gaveUp:
		if !errors.Is(got.err, lockcore.ErrWaitTimeout) {
			r.t.Fatalf("the writer behind a reader: %v, want ErrWaitTimeout", got.err)
		}
	case <-time.After(awaitBound):
		r.t.Fatal("the writer's wait never ended")
	}
	select {
	case got := <-behind:
		if got.err != nil {
			r.t.Fatalf("the reader behind a writer that gave up: %v", got.err)
		}
		r.release(got.ls)
	case <-time.After(awaitBound):
		r.t.Fatal("a reader queued behind a writer that gave up was not let in beside the reader holding")
	}
	r.release(r0)

	s := holders{unordered: !r.orderedFences()}
	s.run(r, r.key("load"), 4, func(i int) lifecycle.Policy {
		if i%8 == 0 {
			return lifecycle.Policy{Wait: checkBound}
		}
		return shared
	})
	s.verify(r)
	if s.most < 2 {
		r.t.Errorf("at most %d readers held the key at once: they do not share", s.most)
	}
	r.release(r.wantFreed(r.b, r.key("load"), "after the load"))
}

// acquired is what an acquisition returned.
type acquired struct {
	ls  *lifecycle.Lease
	err error
}

// later starts an acquisition of k on e with p, whose result the returned
// channel gets. When the check ends first, the acquisition is cancelled
// and what it got released.
func (r *rig) later(e lifecycle.Locker, k lockcore.Key, p lifecycle.Policy) <-chan acquired {
	ctx, cancel := context.WithCancel(r.ctx)
	out, done := make(chan acquired, 1), make(chan acquired, 1)
	go func() {
		ls, err := e.Acquire(ctx, k, p)
		got := acquired{ls, err}
		select {
		case out <- got:
		default:
		}
		done <- got
	}()
	r.t.Cleanup(func() {
		cancel()
		select {
		case got := <-done:
			if got.ls != nil && len(out) == 1 {
				_ = got.ls.Release(context.Background()) // never taken from out
			}
		case <-time.After(awaitBound):
		}
	})
	return out
}

// checkWriterBound: a writer that arrives in a continuous stream of
// readers waits only for the readers that held the key when it arrived:
// of the readers that keep coming on four engines, at most two per
// reading goroutine enter after the writer asked (one that held the key
// then, and one that asked before the writer's call reached the
// backend), where an engine that lets readers pass it lets them all.
func checkWriterBound(r *rig) {
	const readers = 8
	k := r.key("k")
	engines := r.engines()
	stop := make(chan struct{})
	var (
		entered atomic.Int64 // reader sections entered
		wg      sync.WaitGroup
	)
	for i := range readers {
		e := engines[i%len(engines)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 400 { // bounded: about 2s of reading, should the writer never get in
				select {
				case <-stop:
					return
				default:
				}
				ls, err := e.Acquire(r.ctx, k, shared)
				if err != nil {
					r.t.Errorf("a reader: %v", err)
					return
				}
				entered.Add(1)
				time.Sleep(5 * time.Millisecond) // a reader's work
				_ = ls.Release(context.Background())
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	if !r.eventually(func() bool { return entered.Load() >= 2*readers }) {
		r.t.Fatalf("the readers never got going: %d entered", entered.Load())
	}
	before, asked := entered.Load(), time.Now()
	w, err := r.a.Acquire(r.ctx, k, lifecycle.Policy{Wait: checkBound})
	after, waited := entered.Load(), time.Since(asked)
	if err != nil {
		r.t.Fatalf("the writer: %v", err)
	}
	r.release(w)
	r.t.Logf("the writer waited %v; %d readers entered meanwhile (bound %d)", waited, after-before, 2*readers)
	if passed := after - before; passed > 2*readers {
		r.t.Errorf("%d readers entered while a writer waited behind %d reading goroutines: readers pass a queued writer", passed, readers)
	}
}

// checkPermits: at most n holders at once, each in a slot of its own among
// 0..n-1, with fences above those of the holds before, the key freed
// meanwhile or not; a freed slot is the next holder's; a hold with a greater n
// enters beside n holders and a smaller one does not; under load, 64
// goroutines on four engines never exceed the permits.
func checkPermits(r *rig) {
	k := r.key("k")
	ff := lifecycle.Policy{Wait: lockcore.FailFast, Share: 3}
	before := r.acquire(r.b, r.ctx, k, ff)
	r.release(before)
	var ls []*lifecycle.Lease
	for i := range 3 {
		l := r.acquire([]lifecycle.Locker{r.a, r.b}[i%2], r.ctx, k, ff)
		if slot, ok := l.Slot(); !ok || slot != i {
			r.t.Fatalf("permit %d: slot %d (%v), want the lowest free, %d", i, slot, ok, i)
		}
		if r.orderedFences() && l.Fence() <= before.Fence() {
			r.t.Fatalf("permit %d: fence %d, not above the released one's %d", i, l.Fence(), before.Fence())
		}
		ls = append(ls, l)
	}
	r.wantBusy(r.a, k, "three of three permits held")
	if l, err := r.a.Acquire(r.ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, Share: 2}); err == nil {
		_ = l.Release(context.Background())
		r.t.Fatalf("a hold of 2 permits entered beside 3 holders")
	}
	wide := r.acquire(r.b, r.ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, Share: 5})
	if slot, _ := wide.Slot(); slot != 3 {
		r.t.Fatalf("a hold of 5 permits beside 3: slot %d, want 3", slot)
	}
	r.wantBusy(r.b, k, "a writer beside permits")
	if op, ok := r.ea.(lockcore.Operator); ok {
		info, err := op.Inspect(r.ctx, k)
		if err != nil {
			r.t.Fatalf("Inspect: %v", err)
		}
		var slots []int
		for _, h := range info.Holders {
			if h.Share != 3 && h.Share != 5 {
				r.t.Errorf("Inspect: a holder with Share %d, want 3 or 5", h.Share)
			}
			slots = append(slots, h.Slot)
		}
		slices.Sort(slots)
		if !slices.Equal(slots, []int{0, 1, 2, 3}) {
			r.t.Errorf("Inspect: holders in slots %v, want [0 1 2 3]", slots)
		}
	}
	r.release(wide)
	r.release(ls[1])
	var (
		again *lifecycle.Lease
		err   error
	)
	if !r.eventually(func() bool {
		again, err = r.a.Acquire(r.ctx, k, ff)
		return err == nil
	}) {
		r.t.Fatalf("a permit released: none free within %v: %v", awaitBound, err)
	}
	if slot, _ := again.Slot(); slot != 1 {
		r.t.Errorf("after slot 1 was released: slot %d, want 1", slot)
	}
	for _, l := range []*lifecycle.Lease{ls[0], ls[2], again} {
		r.release(l)
	}

	s := holders{unordered: !r.orderedFences()}
	s.run(r, r.key("load"), 4, func(i int) lifecycle.Policy { return permits(3) })
	s.verify(r)
	r.release(r.wantFreed(r.a, r.key("load"), "after the load"))
}

// checkUpgrade: a writer re-enters as a reader, in memory and by its
// propagated token, with its fence; a reader asking for the exclusive
// lock, in memory or by its propagated token, fails at once with
// ErrUpgrade (not ErrNotAcquired), and its hold goes on; a shared re-entry
// has the slot of its hold.
func checkUpgrade(r *rig) {
	k := r.key("k")
	w := r.acquire(r.a, r.ctx, k, failFast)
	ffShared := lifecycle.Policy{Wait: lockcore.FailFast, Share: lifecycle.ShareAll}
	in := r.acquire(r.a, w.Context(), k, ffShared)
	by := r.acquire(r.b, r.carried(w.Context()), k, ffShared)
	if in.Fence() != w.Fence() || by.Fence() != w.Fence() {
		r.t.Fatalf("a writer re-entering as a reader: fences %d and %d, want the writer's %d", in.Fence(), by.Fence(), w.Fence())
	}
	for _, l := range []*lifecycle.Lease{by, in, w} {
		r.release(l)
	}

	rd := r.acquire(r.a, r.ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, Share: 2})
	slot, _ := rd.Slot()
	for _, try := range []struct {
		what string
		e    lifecycle.Locker
		ctx  context.Context
	}{{"in memory", r.a, rd.Context()}, {"by its propagated token", r.b, r.carried(rd.Context())}} {
		start := time.Now()
		ls, err := try.e.Acquire(try.ctx, k, lifecycle.Policy{Wait: checkBound})
		if err == nil {
			_ = ls.Release(context.Background())
			r.t.Fatalf("a reader asking for the exclusive lock %s got it", try.what)
		}
		if !errors.Is(err, lockcore.ErrUpgrade) || errors.Is(err, lockcore.ErrNotAcquired) {
			r.t.Fatalf("a reader asking for the exclusive lock %s: %v, want ErrUpgrade alone", try.what, err)
		}
		if took := time.Since(start); took > awaitBound {
			r.t.Fatalf("a reader asking for the exclusive lock %s: refused after %v, not at once", try.what, took)
		}
		if err := rd.Err(); err != nil {
			r.t.Fatalf("the reader's hold after a refused upgrade %s: %v", try.what, err)
		}
		re := r.acquire(try.e, try.ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, Share: 2})
		if s, ok := re.Slot(); re.Fence() != rd.Fence() || !ok || s != slot {
			r.t.Fatalf("a shared re-entry %s: fence %d slot %d, want its hold's %d and %d", try.what, re.Fence(), s, rd.Fence(), slot)
		}
		r.release(re)
	}
	r.release(rd)
	r.release(r.wantFreed(r.b, k, "after the refused upgrades"))
}

// checkSeveralKeys: lifecycle.AcquireAll takes several keys all or nothing
// in one wait budget. Under load, 64 goroutines on four engines naming
// {A, B}, {B, A}, A or B finish (no deadlock), never overlap on a key, and
// leave both free; a request whose second key is busy holds nothing after
// it fails, and fails within its one budget (at once when failing fast);
// the context carries every hold with its own fence; a context holding one
// of the keys re-enters it.
func checkSeveralKeys(r *rig) {
	a, b := r.key("a"), r.key("b")
	ls, err := lifecycle.AcquireAll(r.ctx, r.a, []lockcore.Key{b, a, b}, failFast)
	if err != nil {
		r.t.Fatalf("AcquireAll of two free keys: %v", err)
	}
	held := lifecycle.HeldFrom(ls[len(ls)-1].Context())
	if len(ls) != 2 || len(held) != 2 || held[0].Fence == 0 || held[1].Fence == 0 {
		r.t.Fatalf("AcquireAll: %d leases, the context holds %+v; want both keys, once each, with their fences", len(ls), held)
	}
	r.wantBusy(r.b, a, "a held by AcquireAll")
	r.wantBusy(r.b, b, "b held by AcquireAll")
	if err := lifecycle.ReleaseAll(context.Background(), ls); err != nil {
		r.t.Fatal(err)
	}

	// Re-entry: a context holding one of the keys re-enters it and takes
	// the other; the nested release leaves the outer hold.
	outer := r.acquire(r.a, r.ctx, a, failFast)
	ls, err = lifecycle.AcquireAll(outer.Context(), r.a, []lockcore.Key{b, a}, failFast)
	if err != nil {
		r.t.Fatalf("AcquireAll of a held key and a free one from the holder's context: %v", err)
	}
	if ls[0].Key() != a || ls[0].Fence() != outer.Fence() || !ls[0].Reentered() || ls[1].Reentered() {
		r.t.Fatalf("AcquireAll from a's holder: leases on %v (fence %d, re-entered %v), %v (re-entered %v); want a re-entered with fence %d, then b taken",
			ls[0].Key(), ls[0].Fence(), ls[0].Reentered(), ls[1].Key(), ls[1].Reentered(), outer.Fence())
	}
	if err := lifecycle.ReleaseAll(context.Background(), ls); err != nil {
		r.t.Fatal(err)
	}
	r.wantBusy(r.b, a, "a, still held by the outer lease after the nested AcquireAll was released")
	r.release(r.wantFreed(r.b, b, "b after the nested AcquireAll was released"))
	r.release(outer)

	// All or nothing, in one budget; failing fast, at once.
	other := r.acquire(r.b, r.ctx, b, failFast)
	start := time.Now()
	if ls, err := lifecycle.AcquireAll(r.ctx, r.a, []lockcore.Key{a, b}, failFast); err == nil {
		_ = lifecycle.ReleaseAll(context.Background(), ls)
		r.t.Fatal("AcquireAll failing fast got a key another owner holds")
	} else if !errors.Is(err, lockcore.ErrNotAcquired) || errors.Is(err, lockcore.ErrWaitTimeout) {
		r.t.Fatalf("AcquireAll failing fast with its second key held: %v, want ErrNotAcquired", err)
	}
	if took := time.Since(start); took > awaitBound/2 {
		r.t.Fatalf("AcquireAll failing fast took %v", took)
	}
	r.release(r.wantFreed(r.b, a, "the first key of an AcquireAll that failed fast"))
	const budget = 300 * time.Millisecond
	start = time.Now()
	if ls, err := lifecycle.AcquireAll(r.ctx, r.a, []lockcore.Key{b, a}, lifecycle.Policy{Wait: budget}); err == nil {
		_ = lifecycle.ReleaseAll(context.Background(), ls)
		r.t.Fatal("AcquireAll got a key another owner holds")
	} else if !errors.Is(err, lockcore.ErrWaitTimeout) {
		r.t.Fatalf("AcquireAll with its second key held: %v, want ErrWaitTimeout", err)
	}
	if took := time.Since(start); took < budget || took > budget+awaitBound/2 {
		r.t.Fatalf("AcquireAll with a budget of %v gave up after %v", budget, took)
	}
	r.release(r.wantFreed(r.b, a, "the first key of a failed AcquireAll"))
	r.release(other)

	// Under load. A set whose lease was lost (its context ends with the
	// loss) no longer excludes anyone; one returned lost is a violation.
	engines := r.engines()
	sets := [][]lockcore.Key{{a, b}, {b, a}, {a}, {b}}
	var (
		mu     sync.Mutex
		inside = map[lockcore.Key][]*lifecycle.Lease{} // the leases inside
		errs   []string
		wg     sync.WaitGroup
	)
	for i := range 64 {
		e, keys := engines[i%len(engines)], sets[i%len(sets)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				ls, err := lifecycle.AcquireAll(r.ctx, e, keys, lifecycle.Policy{Wait: checkBound})
				if err != nil {
					r.t.Errorf("AcquireAll(%v): %v", keys, err)
					return
				}
				mu.Lock()
				for _, l := range ls {
					if err := l.Err(); err != nil {
						errs = append(errs, fmt.Sprintf("AcquireAll(%v) returned %v lost: %v", keys, l.Key(), err))
					}
					for _, o := range inside[l.Key()] {
						if o.Err() == nil {
							errs = append(errs, fmt.Sprintf("%v held twice at once (fences %d and %d)", l.Key(), o.Fence(), l.Fence()))
						}
					}
					inside[l.Key()] = append(inside[l.Key()], l)
				}
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				for _, l := range ls {
					inside[l.Key()] = slices.DeleteFunc(inside[l.Key()], func(o *lifecycle.Lease) bool { return o == l })
				}
				mu.Unlock()
				if err := lifecycle.ReleaseAll(context.Background(), ls); err != nil {
					r.t.Errorf("ReleaseAll: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		r.t.Errorf("%d violations, first: %s", len(errs), errs[0])
	}
	r.release(r.wantFreed(r.b, a, "a after the load"))
	r.release(r.wantFreed(r.b, b, "b after the load"))
}
