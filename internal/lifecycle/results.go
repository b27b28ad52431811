package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/lockcore"
)

// ResultsOf returns the engine of l as a lockcore.Results, when it keeps
// results (Promises.Results), or nil.
func ResultsOf(l Locker) lockcore.Results {
	b := l.core().b
	if !b.Promises().Results {
		return nil
	}
	r, _ := b.(lockcore.Results)
	return r
}

// AcquireOrResult acquires key with p as l.Acquire does, through the
// observers of l, or, when the engine of l keeps results and one is stored
// for key, when it is called or while it waits in line, returns that
// result and holds nothing (lockcore.Request.Result). The observers see
// such an acquisition fail with a *lockcore.ResultFound. When the engine
// is unavailable for the acquisition, a stored result read afterwards is
// returned all the same. A lease that
// re-enters one of ctx in memory is returned as Acquire returns it.
func AcquireOrResult(ctx context.Context, l Locker, key lockcore.Key, p Policy) (*Lease, []byte, error) {
	w := &resultWish{key: key}
	ls, err := l.Acquire(context.WithValue(ctx, resultWishKey{}, w), key, p)
	w.used.Store(true) // a lease's context carries it: nothing after asks
	var found *lockcore.ResultFound
	if errors.As(err, &found) {
		if found.Result == nil {
			return nil, []byte{}, nil // an empty result is a result
		}
		return nil, found.Result, nil
	}
	if errors.Is(err, lockcore.ErrUnavailable) {
		// The backend refused the acquisition (out of memory, a Redis
		// refuses it whole) or did not answer: a stored result is read
		// all the same, which writes nothing.
		if rs := ResultsOf(l); rs != nil {
			if res, ok, rerr := rs.Result(ctx, key); rerr == nil && ok {
				return nil, res, nil
			}
		}
	}
	return ls, nil, err
}

// resultWish is AcquireOrResult's word to the Core, through the observers
// in between: the acquisition of key wants a stored result. It is used
// once, by the first acquisition of key that reaches the engine.
type resultWish struct {
	key  lockcore.Key
	used atomic.Bool
}

type resultWishKey struct{}

// wantsResult reports whether ctx asks for the result of key
// (AcquireOrResult), using the wish up.
func wantsResult(ctx context.Context, key lockcore.Key) bool {
	w, _ := ctx.Value(resultWishKey{}).(*resultWish)
	return w != nil && w.key == key && w.used.CompareAndSwap(false, true)
}

// errNotOwn refuses to keep a result with a lease whose hold is not its
// own.
var errNotOwn = fmt.Errorf("%w: a result is kept by the lease that took its key afresh, not by a re-entry or a segment's", lockcore.ErrMisconfigured)

// Keep releases ls, as Release does, and stores res for its key for keep
// with the release, as one step (lockcore.Results.Keep): only while ls is
// live, its own hold (not a re-entry, not a segment's) and still holds
// its key in the engine's backend. When it is not, nothing is stored and
// the lease is released all the same: the error then matches ErrLockLost
// (ErrReleased for a lease released before), or ErrMisconfigured when the
// engine keeps no results or the lease is not its hold's own, and the
// lease is released as Release does. An error matching ErrUnavailable
// means res may or may not be stored.
func Keep(ctx context.Context, ls *Lease, res []byte, keep time.Duration) error {
	rs := ResultsOf(ls.h.e)
	if rs == nil || ls.inMemory() || ls.h.byToken || ls.h.set != nil || ls.h.together {
		err := errNotOwn
		if rs == nil {
			err = fmt.Errorf("%w: the engine keeps no results (lockcore.Promises.Results)", lockcore.ErrMisconfigured)
		}
		return errors.Join(err, ls.Release(ctx))
	}
	h, live, err := ls.let()
	if h == nil {
		return err
	}
	if !live {
		return h.ended(ctx, false, 0, h.free(ctx))
	}
	var began int64
	if h.ev != nil {
		began = mono()
	}
	if !h.freed.CompareAndSwap(false, true) {
		return h.ended(ctx, live, began, nil) // released already at its ceiling
	}
	return h.ended(ctx, live, began, rs.Keep(ctx, h.home.key, h.home.t, res, keep))
}

// ResultObserver is an Observer that is also told what each idempotent
// request came to (package lockotel's is): outcome is one of the
// Result* constants, route the request's route template (or gRPC method),
// and stored the bytes stored for it, for ResultStored.
type ResultObserver interface {
	Observer
	Result(ctx context.Context, route, outcome string, stored int)
}

// The outcomes of an idempotent request (ResultObserver.Result).
const (
	ResultStored    = "stored"     // it ran, and its response was stored
	ResultNotStored = "not_stored" // it ran; its response was too large, streamed or hijacked
	ResultLost      = "lost"       // it ran, and its response could not be stored (lease lost, backend down)
	ResultReplayed  = "replayed"   // a duplicate got the stored response
	ResultConflict  = "conflict"   // a duplicate whose wait ran out while the first ran
	ResultMismatch  = "mismatch"   // the key reused with another payload
)

// ObserveResults makes c tell os of what idempotent requests come to
// (ResultSeen).
func ObserveResults(c *Core, os []ResultObserver) { c.results = os }

// ResultSeen tells the ResultObservers of l (ObserveResults) that an
// idempotent request of route came to outcome, with stored bytes stored.
func ResultSeen(ctx context.Context, l Locker, route, outcome string, stored int) {
	for _, o := range l.core().results {
		o.Result(ctx, route, outcome, stored)
	}
}

// WaitOf returns how long an acquisition with p waits for a lock held by
// another owner: p.Wait, the default for 0, or FailFast.
func WaitOf(p Policy) time.Duration {
	if p.Wait == 0 {
		return defaultWait
	}
	return p.Wait
}
