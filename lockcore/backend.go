package lockcore

import (
	"context"
	"fmt"
	"time"
)

// Backend takes holds in a lock service: the engine contract that leaves
// every lease to this package (see Serve). A Backend never builds a
// lease, re-enters in memory, mints a token or bounds a hold's time: it is
// asked for a hold and gives one back. An engine of the Engine contract
// does all that itself; new engines are Backends.
type Backend interface {
	// Take takes r.Key for r.Token, or re-enters a hold that one of
	// r.Join owns (Promises.TokenReentry), waiting up to r.Wait
	// (FailFast: not at all) and never past ctx. Errors are Engine's:
	// a *ContentionError (ErrNotAcquired, ErrWaitTimeout), with ctx.Err()
	// when ctx ended the wait; ErrUnavailable; ErrClosed. On error nothing
	// is held.
	Take(ctx context.Context, r Request) (Taken, error)
	// Promises says what the backend promises beyond mutual exclusion;
	// Serve refuses a Share it does not promise before Take is called.
	Promises() Promises
	// Close stops the backend: its waiters fail with ErrClosed and its
	// holds are lost.
	Close() error
}

// Request is one acquisition as a Backend is asked for it: its Policy
// validated, its wait filled in, its owner token minted.
type Request struct {
	Key   Key
	Token string   // the owner token of a fresh hold
	Join  []string // propagated owner tokens whose hold it may re-enter
	Share int      // 0: exclusive; n > 0: permits; ShareAll: a reader
	// TTL is the lease length, or 0 for the backend's default.
	TTL time.Duration
	// Wait is FailFast or positive.
	Wait         time.Duration
	Route, Trace string // labels for operators (Policy.Route, Policy.Trace)
	// Restock is Policy.Restock: the acquisition passes a closed gate.
	Restock bool
	// Set: the acquisition is one of several for one request (AcquireAll,
	// AcquireSegment), whose hold may be given back before any handler
	// sees it, when another of the set fails.
	Set bool
}

// Taken is a hold a Backend took. Its methods do not block, but Release
// and, briefly, Token.
type Taken interface {
	Fence() int64
	// Shared reports whether the hold is one of several owners' at once
	// (a reader's or a permit's), and its slot among the key's permits:
	// 0..n-1 for Share n > 0, -1 for none. A hold that re-entered another
	// by token is shared as that one is.
	Shared() (slot int, ok bool)
	// Token is the hold's owner token: the Request's, or the one of its
	// Join it re-entered. Serve reads it when the token may leave the
	// process (an outgoing call, Lease.Token), and, for a Request without
	// Join, not before: from then on another process may re-enter the hold
	// by it, so a backend that hands holds over in memory releases this one
	// through its store. It may block briefly until the store knows the
	// token.
	Token() string
	// Done is closed when the hold ends: lost (Err then says why), or
	// released.
	Done() <-chan struct{}
	// Err returns nil while the hold is certainly held, judged without
	// I/O, and once it is not, why, matching ErrLockLost.
	Err() error
	// Release gives the hold up, once. early is nil when its holder
	// released it, and otherwise why its lease ended first, matching
	// ErrLockLost (ErrMaxHold at the hold's ceiling, while its handler may
	// still run). ctx may be cancelled already: the release goes ahead
	// regardless, bounded by a timeout of the backend's own; ctx is for
	// its values.
	Release(ctx context.Context, early error) error
}

// Batch is a Backend that takes several holds, and gives several up, in
// one exchange with its store; it declares so with Promises.Batch.
type Batch interface {
	Backend
	// TakeAll takes the holds of rs, at least two, their keys distinct
	// and sorted by Key.String, all or none. It returns nil holds and a
	// nil error, having taken nothing, when it cannot take them so;
	// Serve then takes them one by one. When the Wait is FailFast it may
	// fail with the *ContentionError of a key it found held.
	TakeAll(ctx context.Context, rs []Request) ([]Taken, error)
	// ReleaseAll releases holds of this Backend that their holders
	// released, as their Release methods would, each once, and returns
	// each one's error in order.
	ReleaseAll(ctx context.Context, ts []Taken) []error
}

// Serve returns the Engine that takes its holds from b and owns their
// leases: it validates each Policy, re-enters in memory, mints owner
// tokens, makes the leases and their contexts, bounds them by MaxHold,
// and ends a lease when its hold is lost. ev is told of the holds' ends
// (Events.Ended); b tells it of its waits. When b is a Batch that
// declares Promises.Batch, several holds go in one exchange (AcquireAll,
// ReleaseAll).
func Serve(b Backend, ev Events) Engine { return &served{b: b, ev: ev} }

// served is the Engine of Serve.
type served struct {
	b  Backend
	ev Events
}

func (s *served) Promises() Promises { return s.b.Promises() }

func (s *served) Close() error { return s.b.Close() }

// Gatekeeper returns the Backend's gates, when it has them (see
// AcquireSegment).
func (s *served) Gatekeeper() Gatekeeper {
	g, _ := s.b.(Gatekeeper)
	return g
}

// request is the Request of an acquisition of key with p under ctx.
func (s *served) request(ctx context.Context, key Key, p Policy, join []string) (Request, error) {
	if ps := s.b.Promises(); p.Share == ShareAll && !ps.Shared || p.Share > 0 && !ps.Permits {
		return Request{}, fmt.Errorf("%w: Share %d: the backend (%T) does not promise it", ErrMisconfigured, p.Share, s.b)
	}
	return Request{Key: key, Token: NewToken(), Join: join, Share: p.Share, TTL: p.TTL, Wait: p.Wait,
		Route: p.Route, Trace: p.Trace, Restock: p.Restock, Set: inSet(ctx)}, nil
}

func (s *served) Acquire(ctx context.Context, key Key, p Policy) (*Lease, error) {
	ls, p, err := begin(ctx, s, key, p)
	if ls != nil || err != nil {
		return ls, err
	}
	r, err := s.request(ctx, key, p, TokensFrom(ctx))
	if err != nil {
		return nil, err
	}
	t, err := s.b.Take(ctx, r)
	if err != nil {
		return nil, err
	}
	return s.lease(ctx, r, t, p.MaxHold), nil
}

// lease makes the lease of t, taken for r under ctx.
func (s *served) lease(ctx context.Context, r Request, t Taken, maxHold time.Duration) *Lease {
	tok := r.Token
	if len(r.Join) > 0 {
		// It may have re-entered one of them; their holds left the process
		// already, so reading it exposes nothing.
		tok = t.Token()
	}
	ls := newLease(ctx, s, r.Key, tok, t, s.ev)
	select {
	case <-t.Done():
		ls.h.watch() // lost before it was handed out: its handler never runs
	default:
		go ls.h.watch()
	}
	limitHold(ls, maxHold)
	return ls
}

// AcquireGroup takes the locks of keys in one exchange, when b is a Batch
// (see groupAcquirer).
func (s *served) AcquireGroup(ctx context.Context, keys []Key, p Policy) ([]*Lease, error) {
	b, ok := s.b.(Batch)
	if !ok || !s.b.Promises().Batch || p.Validate() != nil {
		return nil, nil
	}
	join := TokensFrom(ctx)
	rs := make([]Request, len(keys))
	for i, k := range keys {
		if k.isZero() || holds(ctx, s, k) {
			return nil, nil // one by one: refused, or re-entered in memory
		}
		r, err := s.request(ctx, k, p, join)
		if err != nil {
			return nil, nil // one by one, each refused
		}
		rs[i] = r
	}
	ts, err := b.TakeAll(ctx, rs)
	if ts == nil || err != nil {
		return nil, err
	}
	leases := make([]*Lease, len(ts))
	for i, t := range ts {
		leases[i] = s.lease(ctx, rs[i], t, p.MaxHold)
		ctx = leases[i].Context()
	}
	return leases, nil
}

// releaseHolds releases the backend holds of hs, each once, as free
// would; those its holders released go together to a Batch backend that
// declares Promises.Batch, as AcquireGroup asks only such a one.
func (s *served) releaseHolds(ctx context.Context, hs []*held) []error {
	errs := make([]error, len(hs))
	b, ok := s.b.(Batch)
	ok = ok && s.b.Promises().Batch
	var (
		ts []Taken
		at []int
	)
	for i, h := range hs {
		if early := h.early(); !ok || early != nil {
			errs[i] = h.t.Release(ctx, early)
			continue
		}
		ts, at = append(ts, h.t), append(at, i)
	}
	if len(ts) > 0 {
		for i, err := range b.ReleaseAll(ctx, ts) {
			errs[at[i]] = err
		}
	}
	return errs
}
