package lockcore

import (
	"context"
	"errors"
	"slices"
	"time"
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
// It returns the leases in the order taken. On error, the ones taken are
// released, last first, and nothing is held; the error is that of the
// acquisition that failed (a *ContentionError with TimedOut when the
// budget ran out before its turn). Release the leases with ReleaseAll.
func AcquireAll(ctx context.Context, e Engine, keys []Key, p Policy) ([]*Lease, error) {
	if len(keys) == 1 {
		ls, err := e.Acquire(ctx, keys[0], p)
		if err != nil {
			return nil, err
		}
		return []*Lease{ls}, nil
	}
	ks := slices.Clone(keys)
	slices.SortFunc(ks, func(a, b Key) int {
		switch {
		case a.s < b.s:
			return -1
		case a.s > b.s:
			return 1
		}
		return 0
	})
	ks = slices.Compact(ks)
	if p.Wait == 0 {
		p.Wait = defaultWait
	}
	var deadline time.Time
	if p.Wait > 0 {
		deadline = time.Now().Add(p.Wait)
	}
	leases, orig := make([]*Lease, 0, len(ks)), ctx
	for _, k := range ks {
		q := p
		if p.Wait > 0 {
			if q.Wait = time.Until(deadline); q.Wait <= 0 {
				q.Wait = FailFast // the budget is spent: one attempt, which may find it free
			}
		}
		ls, err := e.Acquire(ctx, k, q)
		if err != nil {
			var ce *ContentionError
			if p.Wait > 0 && q.Wait == FailFast && errors.As(err, &ce) {
				ce.TimedOut = true
			}
			_ = ReleaseAll(context.WithoutCancel(orig), leases)
			return nil, err
		}
		leases = append(leases, ls)
		ctx = ls.Context()
	}
	return leases, nil
}

// ReleaseAll releases leases, last first, as AcquireAll returned them,
// and returns the first error of their Releases.
func ReleaseAll(ctx context.Context, leases []*Lease) error {
	var first error
	for i := len(leases) - 1; i >= 0; i-- {
		if err := leases[i].Release(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
