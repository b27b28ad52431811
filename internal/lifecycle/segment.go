package lifecycle

import (
	"context"
	"errors"
	"fmt"
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
// (once: a write to the backend); with FailFast and every open segment busy, with the
// ContentionError of the last one tried; otherwise as Acquire does. The
// gates are known only to an engine that is a Gatekeeper, or offers one
// (a method Gatekeeper() Gatekeeper, as a lock.Locker has): with any other
// engine every segment is open. Panics if p.Segments is not positive.
func AcquireSegment(ctx context.Context, e Locker, key lockcore.Key, p Policy) (*Lease, error) {
	n := p.Segments
	if n <= 0 {
		panic(fmt.Sprintf("routelock: lifecycle.AcquireSegment with Segments %d", n))
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if (key == lockcore.Key{}) {
		return nil, fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey)
	}
	if _, _, ok := key.Segmented(); ok {
		return nil, fmt.Errorf("%w: %s is a segment's key already", lockcore.ErrInvalidKey, key)
	}
	p.Segments = 0
	holdsKey := false // ctx holds the resource's own lock through e
	for s := stateFrom(ctx).first(); s != nil; s = s.next() {
		h := s.held
		if h == nil || !h.live() || !madeBy(e, h) {
			continue
		}
		holdsKey = holdsKey || h.key == key
		if base, _, ok := h.key.Segmented(); ok && base == key {
			ls, err := e.Acquire(ctx, h.key, p) // re-entry, in memory
			if err == nil {
				if !ls.inMemory() {
					ls.h.segments = int32(n) // lost meanwhile, and taken afresh
				}
				return ls, nil
			}
			if !errors.Is(err, lockcore.ErrGateClosed) {
				return nil, err
			}
			break // lost meanwhile, and its gate closed: another one
		}
	}
	g := gatekeeperOf(e)
	if g != nil {
		if _, closed := g.GateOf(key); closed {
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
	var deadline time.Time // one wait for every segment tried
	if p.Wait != lockcore.FailFast {
		if p.Wait == 0 {
			p.Wait = defaultWait
		}
		deadline = time.Now().Add(p.Wait)
	}
	start := int(turn(key) % uint32(n))
	var busy error
	ctx, done := markSet(ctx) // a lease may go back unseen, below
	defer done()
	for j := range n {
		k := key.Segment((start + j) % n)
		if g != nil {
			if _, closed := g.GateOf(k); closed {
				continue
			}
		}
		q := p
		if !deadline.IsZero() {
			if q.Wait = time.Until(deadline); q.Wait <= 0 {
				q.Wait = lockcore.FailFast // the wait is spent: one attempt
			}
		}
		ls, err := e.Acquire(ctx, k, q)
		switch {
		case err == nil:
			if g != nil {
				if _, closed := g.GateOf(k); closed {
					// Closed while this acquisition waited in its queue:
					// exhausted, so the handler need not run to find so.
					_ = ls.Release(context.WithoutCancel(ctx))
					continue
				}
			}
			ls.h.segments = int32(n)
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

// NextSegment closes the gate of the segment of the innermost lock ctx
// holds (a handler's, on a route with Policy.Segments), until it is
// opened, as a handler does that finds its segment exhausted; and once
// every segment's gate is closed, as far as this process knows, the
// resource's too. The adapter that took the segment (middleware.Lock)
// then runs the request again, when the handler returns without having
// written a response, under the lock of another open segment, or answers
// as to a closed gate (410 Gone) when there is none (Lease.Moving).
//
// It fails as CloseGate does, and with an error matching ErrMisconfigured
// when the innermost lock is not a segment's; then nothing moves. When the
// gate's write was not confirmed (ErrUnavailable), the request moves on
// all the same, and it returns nil: the segment stays open wherever the
// write did not land (the Redis engine closes a gate only once Redis has
// it), and a request served it next finds it exhausted and closes it
// again.
func NextSegment(ctx context.Context) error {
	h, err := innermost(ctx, "no segment to move on from")
	if err != nil {
		return err
	}
	base, _, ok := h.key.Segmented()
	if !ok || h.segments <= 0 {
		return fmt.Errorf("%w: the innermost lock, of %s, is not a segment's (Policy.Segments)", lockcore.ErrMisconfigured, h.key)
	}
	g, ok := h.gates()
	if !ok {
		return fmt.Errorf("%w: the engine of %s (%T) has no gates", lockcore.ErrMisconfigured, h.key, h.e)
	}
	if err := g.CloseGate(ctx, h.key, 0); err != nil && !errors.Is(err, lockcore.ErrUnavailable) {
		return err
	}
	h.moving.Store(true)
	for i := range int(h.segments) {
		if _, closed := g.GateOf(base.Segment(i)); !closed {
			return nil
		}
	}
	// Every segment closed: so is the resource (each process that finds
	// its last one closed says so; an unconfirmed write is found again).
	_ = g.CloseGate(ctx, base, 0)
	return nil
}

// Moving reports whether the request asked, with NextSegment, to move on
// from the segment this lease holds to another.
func (ls *Lease) Moving() bool { return ls.h.moving.Load() }

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
		return nil, fmt.Errorf("%w: the innermost lock, of %s, is no longer held: %s", lockcore.ErrLockLost, h.key, none)
	}
	return h, nil
}

// gatekeeperOf returns the gates of e: e itself when it is a Gatekeeper,
// or the one it offers with a method Gatekeeper() Gatekeeper (a
// lock.Locker offers its engine's, and an Locker of Serve its Backend's);
// nil for none.
func gatekeeperOf(e Locker) lockcore.Gatekeeper {
	if g, ok := e.(lockcore.Gatekeeper); ok {
		return g
	}
	if o, ok := e.(interface{ Gatekeeper() lockcore.Gatekeeper }); ok {
		return o.Gatekeeper()
	}
	return nil
}

// madeBy reports whether the hold h was made through e: by e itself, or
// by an engine with e's gates (e a lock.Locker, say, or a wrapper that
// offers its engine's gates).
func madeBy(e Locker, h *held) bool {
	if sameBackend(h.e, e) {
		return true
	}
	g := gatekeeperOf(e)
	hg, ok := h.gates()
	return g != nil && ok && g == hg
}
