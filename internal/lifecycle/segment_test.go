package lifecycle_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
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
	lifecycle.Locker // the one it wraps
	n                atomic.Int64
}

func (w *wrapper) Acquire(ctx context.Context, key lockcore.Key, p lifecycle.Policy) (*lifecycle.Lease, error) {
	w.n.Add(1)
	return w.Locker.Acquire(ctx, key, p)
}

// TestAcquireSegment, through a wrapper: segments are handed out in turn;
// fail-fast acquisitions pass busy segments by; a request that holds a
// segment re-enters it; closed segments are skipped; once every one is
// closed (NextSegment), so is the resource, and acquisitions are refused
// by one acquisition of the resource itself, which the engine refuses
// from memory, and none of a segment.
func TestAcquireSegment(t *testing.T) {
	e := &locktest.Engine{}
	w := &wrapper{Locker: lifecycle.Serve(e, nil)}
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
		base, i, ok := lifecycle.Segmented(ls.Key())
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

	// The segment whose stock ran out is closed, and skipped from then on;
	// the others are held (fail-fast): the request stays where it is.
	closed0 := held[0].Key()
	if err := lifecycle.NextSegment(held[0].Context()); !errors.As(err, &ce) || errors.Is(err, lockcore.ErrWaitTimeout) {
		t.Fatalf("moving on, every other segment held: %v, want a ContentionError", err)
	}
	if held[0].Key() != closed0 || held[0].Context().Err() != nil {
		t.Fatalf("a move that failed left %v (context %v), want %v", held[0].Key(), held[0].Context().Err(), closed0)
	}
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
	if _, closed := isClosed(e.GateOf(context.Background(), k)); closed {
		t.Fatal("the resource closed with segments still open")
	}

	// The last two close: one request moves from one to the other, then
	// finds none open, and the resource closes with them.
	{
		ls, err := lifecycle.AcquireSegment(ctx, w, k, p)
		if err != nil {
			t.Fatal(err)
		}
		from := ls.Key()
		if err := lifecycle.NextSegment(ls.Context()); err != nil {
			t.Fatal(err)
		}
		if ls.Key() == from || ls.Key() == closed0 {
			t.Fatalf("moved from %v to %v", from, ls.Key())
		}
		if err := lifecycle.NextSegment(ls.Context()); !errors.Is(err, lockcore.ErrGateClosed) {
			t.Fatalf("no segment left: %v, want ErrGateClosed", err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, closed := isClosed(e.GateOf(context.Background(), k)); !closed {
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
		_ = e.OpenGate(ctx, lifecycle.SegmentKey(k, i))
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
	if _, closed := isClosed(e.GateOf(context.Background(), k)); !closed {
		t.Fatal("CloseGate on a segment's lock left its resource open")
	}
}

// TestAcquireSegmentRefuses: bad input gets a clear error, and nothing is
// held.
func TestAcquireSegmentRefuses(t *testing.T) {
	e := &locktest.Engine{}
	ctx := context.Background()
	k, _ := lockcore.NewKey("a")
	if _, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), lifecycle.SegmentKey(k, 1), lifecycle.Policy{Segments: 2}); !errors.Is(err, lockcore.ErrInvalidKey) {
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
// its holder then finds exhausted (NextSegment, which moves the holder to
// the other segment) does not come back with it: it goes on to the next
// open segment.
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
	// h0 moves to h1's segment, released: the move releases h0's, closed.
	closed := h0.Key()
	_ = h1.Release(ctx)
	if err := lifecycle.NextSegment(h0.Context()); err != nil {
		t.Fatal(err)
	}
	if h0.Key() != h1.Key() {
		t.Fatalf("moved to %v, want %v", h0.Key(), h1.Key())
	}
	_ = h0.Release(ctx)
	select {
	case ls := <-got:
		if ls == nil {
			return
		}
		if ls.Key() == closed {
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

// keyEndings records the keys Events.Ended is told of.
type keyEndings struct {
	mu   sync.Mutex
	keys []lockcore.Key
}

func (r *keyEndings) Waiting(lockcore.Key, int)   {}
func (r *keyEndings) Woken(lockcore.Key, string)  {}
func (r *keyEndings) Renewed(lockcore.Key, error) {}
func (r *keyEndings) ended() []lockcore.Key {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys)
}
func (r *keyEndings) Ended(_ context.Context, k lockcore.Key, _, _ time.Duration, _, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, k)
}

// TestNextSegmentInPlace: a move keeps the request's context (not done,
// the same one), and changes its segment and fencing token; the old
// segment is free at once; a nested acquisition re-enters the new
// segment; Release releases the new segment's hold, so that the engine
// holds nothing; Events.Ended hears of the lease once, with the key it
// ended on.
func TestNextSegmentInPlace(t *testing.T) {
	e := &locktest.Engine{}
	ev := &keyEndings{}
	l := lifecycle.Serve(e, ev)
	ctx := context.Background()
	k, _ := lockcore.NewKey("productID", "42")
	p := lifecycle.Policy{Segments: 3, Wait: time.Second, MaxHold: time.Minute}
	for i := range 3 { // each segment's fences apart from the others'
		for range 2 * i {
			ls, err := lifecycle.Serve(e, nil).Acquire(ctx, lifecycle.SegmentKey(k, i), lifecycle.Policy{})
			if err != nil {
				t.Fatal(err)
			}
			_ = ls.Release(ctx)
		}
	}
	ls, err := lifecycle.AcquireSegment(ctx, l, k, p)
	if err != nil {
		t.Fatal(err)
	}
	hctx := ls.Context()
	from, fence := ls.Key(), ls.Fence()
	if err := lifecycle.NextSegment(hctx); err != nil {
		t.Fatal(err)
	}
	to := ls.Key()
	if base, _, ok := lifecycle.Segmented(to); !ok || base != k || to == from {
		t.Fatalf("moved from %v to %v", from, to)
	}
	if ls.Context() != hctx || hctx.Err() != nil {
		t.Fatalf("the move changed or ended the context: same %v, err %v", ls.Context() == hctx, context.Cause(hctx))
	}
	if err := ls.Err(); err != nil {
		t.Fatalf("after the move: %v", err)
	}
	held := lifecycle.HeldFrom(hctx)
	if len(held) != 1 || held[0].Key != to || held[0].Fence != ls.Fence() || ls.Fence() == fence {
		t.Fatalf("HeldFrom after the move: %+v; lease %v fence %d (was %d)", held, to, ls.Fence(), fence)
	}
	if f, _ := e.Inspect(ctx, to); f.Fence != ls.Fence() {
		t.Fatalf("the engine's fence of %v is %d, the lease's %d", to, f.Fence, ls.Fence())
	}
	if info, err := e.Inspect(ctx, from); err != nil || len(info.Holders) != 0 {
		t.Fatalf("the segment moved from is still held: %+v %v", info, err)
	}

	// A nested acquisition re-enters the new segment, in memory.
	in, err := lifecycle.AcquireSegment(hctx, l, k, p)
	if err != nil || in.Key() != to || !in.ReenteredInMemory() {
		t.Fatalf("nested after the move: %v %v", in, err)
	}
	if err := in.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if hctx.Err() != nil {
		t.Fatalf("the nested release ended the context: %v", context.Cause(hctx))
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if info, err := e.Inspect(ctx, lifecycle.SegmentKey(k, i)); err != nil || len(info.Holders) != 0 {
			t.Fatalf("segment %d still held after Release: %+v %v", i, info, err)
		}
	}
	if !errors.Is(context.Cause(hctx), lockcore.ErrReleased) {
		t.Fatalf("context after Release: %v", context.Cause(hctx))
	}
	if got := ev.ended(); len(got) != 1 || got[0] != to {
		t.Fatalf("Ended told of %v, want once, of %v", got, to)
	}
}

// TestNextSegmentLossAfterMove: once moved, a loss of the new segment's
// hold ends the request's context with ErrLockLost, as any loss does; the
// release of the old one ended nothing.
func TestNextSegmentLossAfterMove(t *testing.T) {
	e := &locktest.Engine{}
	ctx := context.Background()
	k, _ := lockcore.NewKey("productID", "7")
	ls, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), k, lifecycle.Policy{Segments: 2, Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	hctx := ls.Context()
	// The lease's watcher waits on the first segment's hold: it must
	// follow the move to the second.
	awaitParked(t, "(*held).watch")
	if err := lifecycle.NextSegment(hctx); err != nil {
		t.Fatal(err)
	}
	// The old segment's release ended nothing.
	select {
	case <-hctx.Done():
		t.Fatalf("the move ended the context: %v", context.Cause(hctx))
	default:
	}
	if err := ls.Err(); err != nil {
		t.Fatalf("after the move: %v", err)
	}
	if _, err := e.Revoke(ctx, ls.Key(), "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the new segment was revoked, but the context is not done")
	}
	if err := context.Cause(hctx); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", err)
	}
	if err := ls.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("Release after the loss: %v, want ErrLockLost", err)
	}
}

// awaitParked waits, a few seconds at most, until a goroutine whose stack
// names fn is parked on a channel receive.
func awaitParked(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[chan receive") && strings.Contains(g, fn) {
				return
			}
		}
	}
	t.Fatalf("no goroutine in %s parked on a channel", fn)
}

// TestNextSegmentWaits: a move waits for a busy open segment above its
// own up to what is left of the request's wait: it gets it once its
// holder leaves; it skips it (released) when its holder closed it
// meanwhile, and then finds none open; and it fails with ErrWaitTimeout
// when the wait runs out. For one below its own it does not wait: two
// requests moving on to each other's segments would wait on each other.
func TestNextSegmentWaits(t *testing.T) {
	ctx := context.Background()
	k, _ := lockcore.NewKey("productID", "9")
	for _, tc := range []string{"released", "closed", "timeout"} {
		t.Run(tc, func(t *testing.T) {
			e := &locktest.Engine{}
			l := lifecycle.Serve(e, nil)
			wait := 5 * time.Second
			if tc == "timeout" {
				wait = 300 * time.Millisecond
			}
			p := lifecycle.Policy{Segments: 2, Wait: wait}
			r, err := lifecycle.AcquireSegment(ctx, l, k, p)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Release(ctx)
			h, err := lifecycle.AcquireSegment(ctx, l, k, p)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release(ctx)
			// A move waits only for a segment above its own: r takes #0.
			if _, i, _ := lifecycle.Segmented(r.Key()); i != 0 {
				r, h = h, r
			}
			from, other := r.Key(), h.Key()
			moved := make(chan error, 1)
			go func() { moved <- lifecycle.NextSegment(r.Context()) }()
			if err := e.Await(ctx, func() bool {
				info, err := e.Inspect(ctx, other)
				return err == nil && len(info.Waiters) == 1
			}); err != nil {
				t.Fatal(err)
			}
			switch tc {
			case "released":
				_ = h.Release(ctx)
				if err := <-moved; err != nil || r.Key() != other {
					t.Fatalf("moved: %v, to %v; want %v", err, r.Key(), other)
				}
			case "closed":
				// The holder finds its segment exhausted too: nowhere to go.
				if err := lifecycle.NextSegment(h.Context()); !errors.Is(err, lockcore.ErrGateClosed) {
					t.Fatalf("the holder's move: %v, want ErrGateClosed", err)
				}
				_ = h.Release(ctx)
				if err := <-moved; !errors.Is(err, lockcore.ErrGateClosed) || r.Key() != from {
					t.Fatalf("moved: %v, to %v; want ErrGateClosed, staying in %v", err, r.Key(), from)
				}
				if info, err := e.Inspect(ctx, other); err != nil || len(info.Holders) != 0 {
					t.Fatalf("the closed segment is held: %+v %v", info, err)
				}
			case "timeout":
				select {
				case err := <-moved:
					var ce *lockcore.ContentionError
					if !errors.As(err, &ce) || !errors.Is(err, lockcore.ErrWaitTimeout) || r.Key() != from {
						t.Fatalf("moved: %v, to %v; want ErrWaitTimeout, staying in %v", err, r.Key(), from)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("the move waited past the request's wait")
				}
			}
			if err := r.Err(); err != nil || r.Context().Err() != nil {
				t.Fatalf("the request's lease after the move: %v, context %v", err, context.Cause(r.Context()))
			}
		})
	}
}

// TestNextSegmentAfterLoss: a request whose segment was lost (revoked)
// just before it moves on does not move past the loss: NextSegment fails
// with ErrLockLost, the context ends with it, and no segment is left held.
// The engine tells of the loss in a goroutine of its own, which may end
// the lease's context while the move's calls run (they then fail for
// that): 300 rounds, so that the move meets the loss at every point.
func TestNextSegmentAfterLoss(t *testing.T) {
	for round := range 300 {
		e := &locktest.Engine{}
		ctx := context.Background()
		k, _ := lockcore.NewKey("productID", "5")
		ls, err := lifecycle.AcquireSegment(ctx, lifecycle.Serve(e, nil), k, lifecycle.Policy{Segments: 3, Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Revoke(ctx, ls.Key(), "test"); err != nil {
			t.Fatal(err)
		}
		if err := lifecycle.NextSegment(ls.Context()); !errors.Is(err, lockcore.ErrLockLost) {
			t.Fatalf("round %d: moving on from a lost segment: %v, want ErrLockLost", round, err)
		}
		if err := context.Cause(ls.Context()); !errors.Is(err, lockcore.ErrLockLost) {
			t.Fatalf("round %d: context: %v, want ErrLockLost", round, err)
		}
		for i := range 3 {
			if info, err := e.Inspect(ctx, lifecycle.SegmentKey(k, i)); err != nil || len(info.Holders) != 0 {
				t.Fatalf("round %d: segment %d held after a refused move: %+v %v", round, i, info, err)
			}
		}
		_ = ls.Release(ctx)
	}
}

// TestNextSegmentNeverWaitsBelow: a request in the higher of two
// segments, the lower one busy, does not wait for it though its wait has
// seconds left: it fails at once with a ContentionError that is no
// timeout, and keeps its segment (its gate closed); the holder of the
// lower one, moving on, then finds nowhere to go.
func TestNextSegmentNeverWaitsBelow(t *testing.T) {
	e := &locktest.Engine{}
	ctx := context.Background()
	l := lifecycle.Serve(e, nil)
	k, _ := lockcore.NewKey("productID", "11")
	p := lifecycle.Policy{Segments: 2, Wait: 10 * time.Second}
	lo, err := lifecycle.AcquireSegment(ctx, l, k, p)
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Release(ctx)
	hi, err := lifecycle.AcquireSegment(ctx, l, k, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, i, _ := lifecycle.Segmented(lo.Key()); i != 0 {
		lo, hi = hi, lo
	}
	high := hi.Key()
	began := time.Now()
	var ce *lockcore.ContentionError
	if err := lifecycle.NextSegment(hi.Context()); !errors.As(err, &ce) || errors.Is(err, lockcore.ErrWaitTimeout) || hi.Key() != high {
		t.Fatalf("moving on below, busy: %v, in %v; want a ContentionError, no timeout, in %v", err, hi.Key(), high)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("the move took %v: it waited", d)
	}
	// The gate of the higher one is closed now: the lower one's holder
	// finds nowhere to go.
	if err := lifecycle.NextSegment(lo.Context()); !errors.Is(err, lockcore.ErrGateClosed) {
		t.Fatalf("moving on from the lower one: %v, want ErrGateClosed", err)
	}
	_ = hi.Release(ctx)
}

// isClosed reads what Gatekeeper.GateOf returned: the gate, and whether it
// is closed. Panics on any other error: the test's engine answers gates.
func isClosed(g lockcore.Gate, err error) (lockcore.Gate, bool) {
	closed := errors.Is(err, lockcore.ErrGateClosed)
	if err != nil && !closed {
		panic(err)
	}
	return g, closed
}
