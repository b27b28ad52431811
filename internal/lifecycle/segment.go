package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/lockcore"
)

// segmentTurns spread the first segment each acquisition of a resource
// tries over its segments, in turn: a counter per resource, by a hash of
// its key (resources that share one still spread).
var segmentTurns [64]atomic.Uint32

// turn returns the next turn of key's resource.
func turn(key lockcore.Key) uint32 {
	h, s := uint32(2166136261), key.String() // FNV-1a
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return segmentTurns[h%uint32(len(segmentTurns))].Add(1)
}

// AcquireSegment takes the lock of one segment of key's resource, split
// into p.Segments segments (Policy.Segments), on e: the first, in turn
// from one acquisition of the resource to the next, whose gate e does not
// know closed (NextSegment closes it). With FailFast it tries each open
// segment once until one is free; otherwise it waits for the first open
// one (and, should its gate close meanwhile, for the next), p.Wait for
// them all. A context that holds a segment of key through e re-enters it.
//
// It fails with an error matching ErrGateClosed, without a call to the
// backend, when the resource's gate is closed (SoldOut): e's Acquire of
// the resource itself refuses it from memory, so that e's observers hear
// of it; and when every segment's is, after closing the resource's gate
// (once: a write to the backend); with FailFast and every open segment
// busy, with the ContentionError of the last one tried; otherwise as
// Acquire does. The gates are known only when e's engine is a Gatekeeper
// (GatesOf): with any other engine every segment is open. Panics if
// p.Segments is not positive.
func AcquireSegment(ctx context.Context, e Locker, key lockcore.Key, p Policy) (*Lease, error) {
	n := p.Segments
	if n <= 0 {
		panic(fmt.Sprintf("routelock: lifecycle.AcquireSegment with Segments %d", n))
	}
	if p.prepared != e.core() {
		if err := p.Validate(); err != nil {
			return nil, err
		}
	}
	if (key == lockcore.Key{}) {
		return nil, fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey)
	}
	if _, _, ok := Segmented(key); ok {
		return nil, fmt.Errorf("%w: %s is a segment's key already", lockcore.ErrInvalidKey, key)
	}
	p.Segments = 0
	var until int64 // when the wait for a segment runs out (mono); 0 for FailFast
	if p.Wait != lockcore.FailFast {
		if p.Wait == 0 {
			p.Wait = defaultWait
		}
		until = mono() + int64(p.Wait)
	}
	// A lease may go back unseen, below; and a segment's hold keeps the
	// Request it was taken with, for NextSegment.
	ctx, done := markSet(ctx, true)
	defer done()
	holdsKey := false // ctx holds the resource's own lock through e
	for s := stateFrom(ctx).first(); s != nil; s = s.next() {
		h := s.held
		if h == nil || !h.live() || !madeBy(e, h) {
			continue
		}
		at := h.at()
		holdsKey = holdsKey || at.key == key
		if base, _, ok := Segmented(at.key); ok && base == key {
			ls, err := e.Acquire(ctx, at.key, p) // re-entry, in memory
			if err == nil {
				if !ls.inMemory() {
					ls.h.segmented(n, until) // lost meanwhile, and taken afresh
				}
				return ls, nil
			}
			if !errors.Is(err, lockcore.ErrGateClosed) {
				return nil, err
			}
			break // lost meanwhile, and its gate closed: another one
		}
	}
	g := GatesOf(e)
	if g != nil {
		closed, err := gate(ctx, g, key)
		if err != nil {
			return nil, err
		}
		if closed {
			if holdsKey {
				// A re-entry of the resource's own lock would pass its
				// gate; the request's segment would not.
				return nil, GateError(key)
			}
			// The engine refuses it from memory, and its observers hear
			// of it; if it opened meanwhile, the lock of the resource
			// itself is not what is asked for: on to the segments.
			q := p
			q.Wait, q.MaxHold = lockcore.FailFast, 0
			ls, err := e.Acquire(ctx, key, q)
			if errors.Is(err, lockcore.ErrGateClosed) {
				return nil, err
			}
			if err == nil {
				_ = ls.Release(context.WithoutCancel(ctx))
			}
		}
	}
	start := int(turn(key) % uint32(n))
	var busy error
	for j := range n {
		k := SegmentKey(key, (start+j)%n)
		if g != nil {
			if closed, err := gate(ctx, g, k); err != nil {
				return nil, err
			} else if closed {
				continue
			}
		}
		q := p
		q.Wait = waitLeft(until)
		ls, err := e.Acquire(ctx, k, q)
		switch {
		case err == nil:
			if g != nil {
				if closed, _ := gate(ctx, g, k); closed {
					// Closed while this acquisition waited in its queue:
					// exhausted, so the handler need not run to find so.
					_ = ls.Release(context.WithoutCancel(ctx))
					continue
				}
			}
			ls.h.segmented(n, until)
			return ls, nil
		case errors.Is(err, lockcore.ErrGateClosed):
			continue // closed since
		case q.Wait == lockcore.FailFast && errors.Is(err, lockcore.ErrNotAcquired) && ctx.Err() == nil:
			var ce *lockcore.ContentionError
			if p.Wait != lockcore.FailFast && errors.As(err, &ce) {
				ce.TimedOut = true // the wait ran out on the segments before
			}
			busy = err
			continue
		}
		return nil, err
	}
	if busy != nil {
		return nil, busy
	}
	if g != nil {
		// Every segment closed: so is the resource, from now on at one
		// lookup (NextSegment closes it too, where it finds the last
		// segment closed; another process's close may have come after).
		// An operator who reopens it after a restock opens the segments
		// first, then the resource.
		_ = g.CloseGate(context.WithoutCancel(ctx), key, 0)
	}
	return nil, GateError(key)
}

// segmented marks h, a fresh hold, as that of a segment of a resource
// split into n, whose request's wait for a segment runs out at until
// (mono; 0 for FailFast), before its lease is handed out.
func (h *held) segmented(n int, until int64) {
	if m := h.set; m != nil { // else not taken as one of a set: it cannot move
		m.n, m.until = n, until
	}
}

// waitLeft returns what is left at mono's now of a wait that runs out at
// until (0: FailFast): FailFast, one attempt, once it is spent.
func waitLeft(until int64) time.Duration {
	if until == 0 {
		return lockcore.FailFast
	}
	if w := time.Duration(until - mono()); w > 0 {
		return w
	}
	return lockcore.FailFast // the wait is spent: one attempt
}

// NextSegment moves the request whose context is ctx from the segment of
// the innermost lock ctx holds (a handler's, on a route with
// Policy.Segments), found exhausted, to another open segment of its
// resource, in place: it closes the gate of the segment it holds, until
// it is opened; takes the lock of another segment whose gate is open, in
// turn as AcquireSegment does, from the same engine, under the same owner
// token, TTL and labels; puts it under the request's lease in place of
// the old one, which it releases. It returns nil when the request moved:
// the lease, its context (not cancelled by the move) and the context's
// lock state (HeldFrom) now report the new segment, its key and fencing
// token; a loss of the new segment's hold ends the lease as any loss
// does, and the release of the old one does not; the lease's ceiling
// (Policy.MaxHold) runs on from where it was.
//
// When no other segment is open, as far as this process knows, it closes
// the resource's gate too and fails with GateError (matching
// ErrGateClosed); the request keeps the segment it holds until its
// handler returns, and answers as to a closed gate (410 Gone over HTTP,
// FailedPrecondition over gRPC). When every other open segment is held:
// with FailFast it fails with the *ContentionError of the last one tried;
// otherwise it waits for the first open one above its own (by number),
// up to what is left of the wait AcquireSegment began with for the
// request, and then fails with one that matches ErrWaitTimeout; those
// below its own it tries once, since a request that waits holds its
// segment meanwhile: so two requests moving on never wait for each other.
// A segment whose gate closed while it waited for it is released and
// skipped. It fails as CloseGate does, and
// with an error matching ErrMisconfigured when the innermost lock is not
// a segment's; then nothing moves. When the gate's write was not
// confirmed (ErrUnavailable), it moves on all the same: the segment stays
// open wherever the write did not land (the Redis engine closes a gate
// only once Redis has it), and a request given it next finds it exhausted
// and closes it again. On any error the request keeps its segment; when
// its hold was lost before or during the move, the error is the loss's
// cause (matching ErrLockLost), whatever the move's own calls failed with.
func NextSegment(ctx context.Context) (err error) {
	h, err := innermost(ctx, "no segment to move on from")
	if err != nil {
		return err
	}
	cur, m := h.at(), h.set
	base, i, ok := Segmented(cur.key)
	sv := h.e
	if !ok || m == nil || m.n <= 0 {
		return fmt.Errorf("%w: the innermost lock, of %s, is not a segment's (Policy.Segments)", lockcore.ErrMisconfigured, cur.key)
	}
	g, ok := h.gates()
	if !ok {
		return fmt.Errorf("%w: the engine of %s (%T) has no gates", lockcore.ErrMisconfigured, cur.key, sv.b)
	}
	defer func() {
		if err != nil {
			err = h.lostOr(err)
		}
	}()
	if err := g.CloseGate(ctx, cur.key, 0); err != nil && !errors.Is(err, lockcore.ErrUnavailable) {
		return err
	}
	// Like the first segment's Request: the lease's token, and the tokens
	// the request carried besides (propagated, or its outer locks'), as
	// the first one joined them; not the lease's own, whose hold is the
	// one being left, and which need not be exposed for it.
	r := m.req
	r.Token, r.Join, r.Set = h.token, h.st.parent.tokens(), true
	keep := context.WithoutCancel(ctx) // releases go ahead whatever ctx does
	n := m.n
	start := int(turn(base) % uint32(n))
	var busy error
	for j := range n {
		at := (start + j) % n
		k := SegmentKey(base, at)
		if at == i {
			continue
		}
		if closed, err := gate(ctx, g, k); err != nil {
			return err
		} else if closed {
			continue
		}
		// The request holds segment i while it waits: it waits only for
		// a segment above i, and tries one below once, so that requests
		// moving on never wait on each other in a circle. (Each closes
		// its own segment's gate before it looks for another, but another
		// instance may not have heard of that close yet.)
		r.Key, r.Wait = k, lockcore.FailFast
		if at > i {
			r.Wait = waitLeft(m.until)
		}
		t, err := sv.b.Take(ctx, r)
		switch {
		case err == nil:
			closed, _ := gate(ctx, g, k)
			if closed || len(r.Join) > 0 && t.Token() != h.token {
				// Closed while this waited in its queue: exhausted. Or
				// the hold re-entered, by a token the request carries,
				// its caller's hold of that segment: not the request's
				// own to move to.
				_ = t.Release(keep, nil)
				continue
			}
			if !h.move(keep, &seat{t: t, key: k, fence: t.Fence()}) {
				h.settled()
				return h.lost() // lost meanwhile: the context says so
			}
			return nil
		case errors.Is(err, lockcore.ErrGateClosed):
			continue // closed since
		case r.Wait == lockcore.FailFast && errors.Is(err, lockcore.ErrNotAcquired) && ctx.Err() == nil:
			var ce *lockcore.ContentionError
			if m.until != 0 && waitLeft(m.until) == lockcore.FailFast && errors.As(err, &ce) {
				ce.TimedOut = true // the wait ran out on the segments before
			}
			busy = err
			continue
		}
		return err
	}
	if busy != nil {
		return busy
	}
	// Every segment closed: so is the resource (each process that finds
	// its last one closed says so; an unconfirmed write is found again).
	_ = g.CloseGate(ctx, base, 0)
	return GateError(base)
}

// move puts h in seat to, the hold of another segment just taken for it,
// and then releases the seat it held; under losing, so that a loss of the
// old seat told before the swap ends the lease, and one after it does
// nothing. It reports false, having released to's hold instead, when h
// is no longer live, or its hold was freed, or the seat it held is lost
// already (which its watcher may not have heard yet): that loss ends the
// lease, as it would have without the move.
func (h *held) move(ctx context.Context, to *seat) bool {
	h.losing.Lock()
	from := h.at()
	lost := from.t.Err()
	if !h.live() || h.freed.Load() || lost != nil {
		h.losing.Unlock()
		_ = to.t.Release(ctx, nil)
		if lost != nil {
			h.lose(from, lost)
		}
		return false
	}
	h.set.moved.Store(to)
	h.losing.Unlock()
	_ = from.t.Release(ctx, nil)
	return true
}

// innermost returns the hold of the innermost lock ctx holds, when it is
// still live; none says what the caller cannot do without one.
func innermost(ctx context.Context, none string) (*held, error) {
	var h *held
	for s := stateFrom(ctx).first(); s != nil && h == nil; s = s.next() {
		h = s.held
	}
	switch {
	case h == nil:
		return nil, fmt.Errorf("%w: the context holds no lock: %s", lockcore.ErrInvalidKey, none)
	case !h.live():
		return nil, fmt.Errorf("%w: the innermost lock, of %s, is no longer held: %s", lockcore.ErrLockLost, h.at().key, none)
	}
	return h, nil
}

// gate asks g whether the gate of key is closed: closed and nil, or not
// and nil, or the engine's other error (ErrUnavailable, say).
func gate(ctx context.Context, g lockcore.Gatekeeper, key lockcore.Key) (closed bool, err error) {
	if _, err = g.GateOf(ctx, key); err == nil {
		return false, nil
	}
	if errors.Is(err, lockcore.ErrGateClosed) {
		return true, nil
	}
	return false, err
}

// madeBy reports whether the hold h was made through e: by e's engine
// (e a Core, a lock.Locker or a wrapper of either), or by an engine with
// e's gates.
func madeBy(e Locker, h *held) bool {
	if sameBackend(h.e, e) {
		return true
	}
	g := GatesOf(e)
	hg, ok := h.gates()
	// Gates that cannot be compared are those of an engine that cannot
	// be either, which its Locker tells apart (sameBackend).
	return g != nil && ok && reflect.ValueOf(g).Comparable() && g == hg
}
