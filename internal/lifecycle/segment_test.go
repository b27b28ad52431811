package lifecycle_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// wrapper wraps an engine as a telemetry wrapper does, counting the
// acquisitions that reach it.
type wrapper struct {
	inner lifecycle.Locker
	n     atomic.Int64
}

func (w *wrapper) Acquire(ctx context.Context, key lockcore.Key, p lifecycle.Policy) (*lifecycle.Lease, error) {
	w.n.Add(1)
	return w.inner.Acquire(ctx, key, p)
}

func (w *wrapper) Promises() lockcore.Promises { return w.inner.Promises() }

func (w *wrapper) Gatekeeper() lockcore.Gatekeeper {
	return w.inner.(interface{ Gatekeeper() lockcore.Gatekeeper }).Gatekeeper()
}

// TestAcquireSegment, through a wrapper: segments are handed out in turn;
// fail-fast acquisitions pass busy segments by; a request that holds a
// segment re-enters it; closed segments are skipped; once every one is
// closed (NextSegment), so is the resource, and acquisitions are refused
// by one acquisition of the resource itself, which the engine refuses
// from memory, and none of a segment.
func TestAcquireSegment(t *testing.T) {
	e := &locktest.Engine{}
	w := &wrapper{inner: lifecycle.Serve(e, nil)}
	ctx := context.Background()
	k, _ := lockcore.NewKey("productID", "42")
	p := lifecycle.Policy{Segments: 3, Wait: lockcore.FailFast}

	var held []*lifecycle.Lease
	seen := map[int]bool{}
	for range 3 {
		ls, err := lifecycle.AcquireSegment(ctx, w, k, p)
		if err != nil {
			t.Fatal(err)
		}
		base, i, ok := ls.Key().Segmented()
		if !ok || base != k || seen[i] {
			t.Fatalf("segment %v (%d, %v) after %v", ls.Key(), i, ok, seen)
		}
		seen[i] = true
		held = append(held, ls)
	}
	_, err := lifecycle.AcquireSegment(ctx, w, k, p)
	var ce *lockcore.ContentionError
	if !errors.As(err, &ce) {
		t.Fatalf("every segment held: %v, want a ContentionError", err)
	}

	// Re-entry: the context of a segment's lease gets that segment again.
	in, err := lifecycle.AcquireSegment(held[1].Context(), w, k, lifecycle.Policy{Segments: 3})
	if err != nil || in.Key() != held[1].Key() || !in.Reentered() {
		t.Fatalf("re-entry: %v %v (re-entered %v), want %v", in.Key(), err, in != nil && in.Reentered(), held[1].Key())
	}
	if err := in.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The segment whose stock ran out is closed, and skipped from then on.
	if err := lifecycle.NextSegment(held[0].Context()); err != nil {
		t.Fatal(err)
	}
	if !held[0].Moving() || held[1].Moving() {
		t.Fatal("Moving reports the wrong lease")
	}
	closed0 := held[0].Key()
	for _, ls := range held {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 6 {
		ls, err := lifecycle.AcquireSegment(ctx, w, k, p)
		if err != nil {
			t.Fatal(err)
		}
		if ls.Key() == closed0 {
			t.Fatalf("the closed segment %v was handed out", closed0)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, closed := e.GateOf(k); closed {
		t.Fatal("the resource closed with segments still open")
	}

	// The last two close: the resource closes with them.
	for range 2 {
		ls, err := lifecycle.AcquireSegment(ctx, w, k, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := lifecycle.NextSegment(ls.Context()); err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, closed := e.GateOf(k); !closed {
		t.Fatal("every segment closed, but the resource is open")
	}
	before := w.n.Load()
	if _, err := lifecycle.AcquireSegment(ctx, w, k, p); !errors.Is(err, lockcore.ErrGateClosed) || errors.Is(err, lockcore.ErrNotAcquired) {
		t.Fatalf("sold out: %v, want ErrGateClosed", err)
	}
	if n := w.n.Load() - before; n != 1 {
		t.Fatalf("a sold-out acquisition reached the engine %d times, want once: for the resource, which the engine refuses (and its observers hear of)", n)
	}

	// Reopened segments (the resource still closed) are refused too.
	for i := range 3 {
		_ = e.OpenGate(ctx, k.Segment(i))
	}
	if _, err := lifecycle.AcquireSegment(ctx, w, k, p); !errors.Is(err, lockcore.ErrGateClosed) {
		t.Fatalf("resource closed, segments open: %v, want ErrGateClosed", err)
	}
	_ = e.OpenGate(ctx, k)
	ls, err := lifecycle.AcquireSegment(ctx, w, k, p)
	if err != nil {
		t.Fatalf("all open again: %v", err)
	}
	// SoldOut (CloseGate) on a segment closes the resource.
	if err := lifecycle.CloseGate(ls.Context(), 0); err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(ctx)
	if _, closed := e.GateOf(k); !closed {
		t.Fatal("CloseGate on a segment's lock left its resource open")
	}
}

// TestAcquireSegmentRefuses: bad input gets a clear error, and nothing is
// held.
func TestAcquireSegmentRefuses(t *testing.T) {
	e := &locktest.Engine{}
	ctx := context.Background()
	k, _ := lockcore.NewKey("a")
	if _, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), k.Segment(1), lifecycle.Policy{Segments: 2}); !errors.Is(err, lockcore.ErrInvalidKey) {
		t.Fatalf("a segment's key: %v", err)
	}
	if _, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), lockcore.Key{}, lifecycle.Policy{Segments: 2}); !errors.Is(err, lockcore.ErrInvalidKey) {
		t.Fatalf("zero key: %v", err)
	}
	if _, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), k, lifecycle.Policy{Segments: 2, Share: 2}); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("with Share: %v", err)
	}
	ls, err := lifecycle.Serve(e, nil).Acquire(ctx, k, lifecycle.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if err := lifecycle.NextSegment(ls.Context()); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("NextSegment on a plain lock: %v", err)
	}
	_ = ls.Release(ctx)
	if err := lifecycle.NextSegment(ls.Context()); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("NextSegment after release: %v", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("AcquireSegment with Segments 0 did not panic")
			}
		}()
		_, _ = lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), k, lifecycle.Policy{})
	}()
	if infos, _, _ := e.List(ctx, "", 100); len(infos) != 0 {
		t.Fatalf("held after refusals: %+v", infos)
	}
}

// TestSegmentTurnsPerResource: turns are kept per resource, so that
// another resource's acquisitions do not send this one's to its busy
// segment while the other is free.
func TestSegmentTurnsPerResource(t *testing.T) {
	e := &locktest.Engine{}
	ctx := context.Background()
	a, _ := lockcore.NewKey("productID", "42")
	b, _ := lockcore.NewKey("productID", "7")
	p := lifecycle.Policy{Segments: 2, Wait: 50 * time.Millisecond}
	for range 20 {
		a1, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), a, p)
		if err != nil {
			t.Fatal(err)
		}
		b1, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), b, p)
		if err != nil {
			t.Fatal(err)
		}
		_ = b1.Release(ctx)
		a2, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), a, p)
		if err != nil {
			t.Fatalf("the second of two buyers of one resource: %v; its other segment was free", err)
		}
		_ = a1.Release(ctx)
		_ = a2.Release(ctx)
	}
}

// TestSegmentClosedWhileQueued: an acquisition queued on a segment that
// its holder then finds exhausted (NextSegment) does not come back with
// it: it goes on to the next open segment.
func TestSegmentClosedWhileQueued(t *testing.T) {
	e := &locktest.Engine{}
	ctx := context.Background()
	k, _ := lockcore.NewKey("productID", "42")
	p := lifecycle.Policy{Segments: 2, Wait: 5 * time.Second}
	h0, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), k, p)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), k, p)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lifecycle.Lease, 1)
	go func() {
		ls, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), k, p)
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	// The turn after h1's is h0's segment: the waiter queues there.
	if err := e.Await(ctx, func() bool {
		info, err := e.Inspect(ctx, h0.Key())
		return err == nil && len(info.Waiters) == 1
	}); err != nil {
		t.Fatal(err)
	}
	if err := lifecycle.NextSegment(h0.Context()); err != nil {
		t.Fatal(err)
	}
	_ = h0.Release(ctx)
	_ = h1.Release(ctx)
	select {
	case ls := <-got:
		if ls == nil {
			return
		}
		if ls.Key() == h0.Key() {
			t.Fatalf("the waiter came back with the closed segment %v", ls.Key())
		}
		_ = ls.Release(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never got a segment")
	}
}

// TestSegmentGateOverOuterHold: a request that holds the resource's own
// lock (taken before its gate closed) and then asks for a segment of it is
// refused as sold out, and its outer hold keeps its ceiling: the refusal
// re-enters nothing.
func TestSegmentGateOverOuterHold(t *testing.T) {
	e := &locktest.Engine{}
	ctx := context.Background()
	k, _ := lockcore.NewKey("productID", "42")
	outer, err := lifecycle.Serve(e, nil).Acquire(ctx, k, lifecycle.Policy{MaxHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Release(ctx)
	if err := e.CloseGate(ctx, k, 0); err != nil {
		t.Fatal(err)
	}
	ls, err := lifecycle.AcquireSegment(outer.Context(), lifecycle.Serve(e, nil), k, lifecycle.Policy{Segments: 2, MaxHold: 50 * time.Millisecond})
	if !errors.Is(err, lockcore.ErrGateClosed) {
		if ls != nil {
			_ = ls.Release(ctx)
		}
		t.Fatalf("a segment of a sold-out resource, asked by its holder: %v %v, want ErrGateClosed", ls, err)
	}
	select {
	case <-outer.Context().Done():
		t.Fatalf("the outer hold ended: %v", context.Cause(outer.Context()))
	case <-time.After(200 * time.Millisecond): // four times the segment route's ceiling
	}
}

// setRecorder is an in-memory Backend that records Request.Set of each
// hold it is asked for.
type setRecorder struct {
	*locktest.Engine
	sets []bool
}

func (r *setRecorder) Take(ctx context.Context, req lockcore.Request) (lockcore.Hold, error) {
	r.sets = append(r.sets, req.Set)
	return r.Engine.Take(ctx, req)
}

// TestInSet: the acquisitions AcquireAll makes one key at a time and those
// AcquireSegment makes ask the Backend with Request.Set (it then hands
// them no hold in memory, since they may go back unseen); a lone Acquire
// does not, and neither does one made under a context of a set's leases.
func TestInSet(t *testing.T) {
	ctx := context.Background()
	r := &setRecorder{Engine: &locktest.Engine{}}
	e := lifecycle.Serve(r, nil)
	a, _ := lockcore.NewKey("a")
	b, _ := lockcore.NewKey("b")
	c, _ := lockcore.NewKey("c")
	ls, err := e.Acquire(ctx, a, lifecycle.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(ctx)
	set, err := lifecycle.AcquireAll(ctx, e, []lockcore.Key{a, b}, lifecycle.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	seg, err := lifecycle.AcquireSegment(ctx, e, a, lifecycle.Policy{Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	after, err := e.Acquire(set[1].Context(), c, lifecycle.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, true, true, true, false}; !slices.Equal(r.sets, want) {
		t.Errorf("Request.Set of the acquisitions: %v, want %v (Acquire, AcquireAll's two, AcquireSegment's, Acquire under the set's context)", r.sets, want)
	}
	_ = after.Release(ctx)
	_ = lifecycle.ReleaseAll(ctx, set)
	_ = seg.Release(ctx)
}
