package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/lockcore"
)

// AcquireAll takes the locks of keys on e, all or nothing, with one wait
// budget: p.Wait (5 seconds when 0) for the lot, each acquisition waiting
// only for what is left of it, and never past ctx. It takes them in a
// canonical order (by Key.String), whatever the order keys name them in,
// so that requests naming {A, B} and {B, A} never wait for each other in
// a cycle; a key named twice is taken once. Each acquisition is made with
// the context of the one before, so that the last lease's Context carries
// every hold (HeldFrom lists them, each with its own fence) and is
// cancelled when any of them is lost.
//
// When e has an AcquireAll method of its own, with this function's
// parameters after e, AcquireAll calls it instead: a *lock.Locker's applies
// its Defaults to the lot and calls this function with its engine. (Such a
// method must not call this function with its own receiver.)
//
// When e can take them all in one exchange with its backend (an Locker
// of Serve whose Backend is a Batch), AcquireAll asks it first, and takes
// them one by one only when it declines.
//
// It returns the leases in the order taken. On error, the ones taken are
// released, last first, and nothing is held; the error is that of the
// acquisition that failed (a *ContentionError with TimedOut when the
// budget ran out before its turn). A lease lost while the others were
// taken fails the lot too: as a *ContentionError on its key joined with
// the loss, or with the loss alone when it matches ErrUnavailable. Release
// the leases with ReleaseAll.
func AcquireAll(ctx context.Context, e Locker, keys []lockcore.Key, p Policy) ([]*Lease, error) {
	if p.Segments != 0 {
		return nil, fmt.Errorf("%w: Segments %d: a route's several resources cannot be segmented", lockcore.ErrMisconfigured, p.Segments)
	}
	if a, ok := e.(allAcquirer); ok {
		return a.AcquireAll(ctx, keys, p)
	}
	if len(keys) == 1 {
		ls, err := e.Acquire(ctx, keys[0], p)
		if err != nil {
			return nil, err
		}
		return []*Lease{ls}, nil
	}
	ks := slices.Clone(keys)
	slices.SortFunc(ks, func(a, b lockcore.Key) int { return strings.Compare(a.String(), b.String()) })
	ks = slices.Compact(ks)
	if p.Wait == 0 {
		p.Wait = defaultWait
	}
	var deadline time.Time
	if p.Wait > 0 {
		deadline = time.Now().Add(p.Wait)
	}
	if g := groupOf(e); g != nil && len(ks) > 1 {
		if leases, err := g(ctx, ks, p); err != nil {
			_ = ReleaseAll(context.WithoutCancel(ctx), leases)
			return nil, err
		} else if leases != nil {
			return together(ctx, leases)
		}
	}
	leases, orig := make([]*Lease, 0, len(ks)), ctx
	ctx, done := markSet(ctx, false)
	defer done()
	for _, k := range ks {
		q := p
		if p.Wait > 0 {
			if q.Wait = time.Until(deadline); q.Wait <= 0 {
				q.Wait = lockcore.FailFast // the budget is spent: one attempt, which may find it free
			}
		}
		ls, err := e.Acquire(ctx, k, q)
		if err != nil {
			var ce *lockcore.ContentionError
			if p.Wait > 0 && q.Wait == lockcore.FailFast && errors.As(err, &ce) {
				ce.TimedOut = true
			}
			_ = ReleaseAll(context.WithoutCancel(orig), leases)
			return nil, err
		}
		leases = append(leases, ls)
		ctx = ls.Context()
	}
	return together(orig, leases)
}

// together returns leases as one set, or, when one of them was lost while
// the others were taken, releases them all and fails as an acquisition
// that found that key taken (a *ContentionError joined with the loss), or
// with the loss itself when it matches ErrUnavailable: a set is never
// handed out with a lease that no longer holds.
func together(ctx context.Context, leases []*Lease) ([]*Lease, error) {
	for _, ls := range leases {
		if err := ls.Err(); err != nil {
			_ = ReleaseAll(context.WithoutCancel(ctx), leases)
			if errors.Is(err, lockcore.ErrUnavailable) {
				return nil, err
			}
			return nil, errors.Join(&lockcore.ContentionError{Key: ls.Key().String()}, err)
		}
	}
	markTogether(leases)
	return leases, nil
}

// markTogether marks the fresh holds of leases as taken together, when
// they are several.
func markTogether(leases []*Lease) {
	if len(leases) < 2 {
		return
	}
	for _, ls := range leases {
		if !ls.inMemory() {
			ls.h.together = true
		}
	}
}

// allAcquirer is a Locker with an AcquireAll method of its own.
type allAcquirer interface {
	AcquireAll(ctx context.Context, keys []lockcore.Key, p Policy) ([]*Lease, error)
}

// groupOf returns how e takes several locks in one exchange with its
// engine: a Core's, or a groupAcquirer's; nil for neither.
func groupOf(e Locker) func(context.Context, []lockcore.Key, Policy) ([]*Lease, error) {
	switch g := e.(type) {
	case *Core:
		return g.acquireGroup
	case groupAcquirer:
		return g.AcquireGroup
	}
	return nil
}

// groupAcquirer is a Locker that can take several locks in one exchange
// with its engine: a wrapper of a Core whose engine is a Batch, which
// observes the exchange (AcquireGroup).
type groupAcquirer interface {
	// AcquireGroup takes the locks of keys, at least two, distinct and
	// sorted by Key.String, all at once or none, as AcquireAll would: in
	// that order, each lease made with the context of the one before. It
	// returns nil leases and a nil error, having taken nothing, when it
	// cannot take them so (for instance when one of them is held and p.Wait
	// is not FailFast): AcquireAll then takes them one by one. When p.Wait
	// is FailFast it may fail with the *ContentionError of a key it found
	// held. p.Wait is positive or FailFast.
	AcquireGroup(ctx context.Context, keys []lockcore.Key, p Policy) ([]*Lease, error)
}

// ReleaseAll releases leases, last first, as AcquireAll returned them,
// and returns the first error of their Releases. The backend releases of
// holds made by one Batch backend go together (Batch.ReleaseAll).
func ReleaseAll(ctx context.Context, leases []*Lease) error {
	if len(leases) == 1 {
		return leases[0].Release(ctx)
	}
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	type due struct {
		h    *held
		live bool
		err  error
	}
	dues := make([]due, 0, len(leases))
	for i := len(leases) - 1; i >= 0; i-- {
		h, live, err := leases[i].let()
		if h == nil {
			note(err)
			continue
		}
		dues = append(dues, due{h: h, live: live})
	}
	began := mono()
	var (
		ge    *Core
		holds []*held
		of    []int // the index in dues of each of holds
	)
	for i := range dues {
		h := dues[i].h
		g := h.e
		if ge != nil && g != ge {
			dues[i].err = h.free(ctx)
			continue
		}
		if h.freed.CompareAndSwap(false, true) { // else released already, as free would find
			ge, holds, of = g, append(holds, h), append(of, i)
		}
	}
	switch len(holds) {
	case 0:
	case 1:
		dues[of[0]].err = holds[0].at().t.Release(ctx, holds[0].early())
	default:
		for j, err := range ge.releaseHolds(ctx, holds) {
			dues[of[j]].err = err
		}
	}
	for _, d := range dues {
		note(d.h.ended(ctx, d.live, began, d.err))
	}
	return first
}

// inSetKey marks the context of the acquisitions that AcquireAll and
// AcquireSegment make (inSet).
type inSetKey struct{}

// setMark is the mark of markSet: on until done is called; segment for
// AcquireSegment's.
type setMark struct {
	on      atomic.Bool
	segment bool
}

// markSet returns ctx marked for inSet until done is called: the leases'
// contexts, derived from it, are not marked once they are handed out.
// segment marks AcquireSegment's acquisitions, whose holds may move
// (inSegment).
func markSet(ctx context.Context, segment bool) (context.Context, func()) {
	m := &setMark{segment: segment}
	m.on.Store(true)
	return context.WithValue(ctx, inSetKey{}, m), func() { m.on.Store(false) }
}

// inSet reports whether ctx is that of an acquisition that AcquireAll
// makes as one of a set of keys taken one at a time, or that
// AcquireSegment makes for one segment of a key: the set may still fail,
// or the segment turn out exhausted, after it, and its lease be released
// before any caller saw it. An engine that hands a released hold straight
// to a waiting acquisition (without its store) hands none to such an
// acquisition, since what the hold went through (an operator's
// revocation, say) is told to whoever holds it next, and nobody would
// hear it. It is false again once AcquireAll or AcquireSegment returned.
func inSet(ctx context.Context) bool {
	m, _ := ctx.Value(inSetKey{}).(*setMark)
	return m != nil && m.on.Load()
}

// inSegment reports whether ctx is that of an acquisition AcquireSegment
// makes (inSet): its hold may move to another segment (NextSegment).
func inSegment(ctx context.Context) bool {
	m, _ := ctx.Value(inSetKey{}).(*setMark)
	return m != nil && m.segment && m.on.Load()
}
