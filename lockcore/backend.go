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
}

// Taken is a hold a Backend took. Its methods do not block, but Release.
type Taken interface {
	Fence() int64
	// Slot is the hold's slot among permits, or -1.
	Slot() int
	// Token is the hold's owner token: the Request's, or the one of its
	// Join it re-entered.
	Token() string
	// Done is closed when the hold is lost; Err then says why.
	Done() <-chan struct{}
	// Err returns nil while the hold is certainly held, judged without
	// I/O, and once it is not, why, matching ErrLockLost.
	Err() error
	// Release gives the hold up, once; ctx may be cancelled already (see
	// Hold.Release).
	Release(ctx context.Context) error
}

// Serve returns the Engine that takes its holds from b and owns their
// leases: it validates each Policy, re-enters in memory, mints owner
// tokens, makes the leases and their contexts, bounds them by MaxHold,
// and ends a lease when its hold is lost. ev is told of the holds' ends
// (Events.Ended); b tells it of its waits.
func Serve(b Backend, ev Events) Engine { return &served{b: b, ev: ev} }

// served is the Engine of Serve.
type served struct {
	b  Backend
	ev Events
}

func (s *served) Promises() Promises { return s.b.Promises() }

func (s *served) Close() error { return s.b.Close() }

func (s *served) Acquire(ctx context.Context, key Key, p Policy) (*Lease, error) {
	ls, p, err := Begin(ctx, s, key, p)
	if ls != nil || err != nil {
		return ls, err
	}
	if ps := s.b.Promises(); p.Share == ShareAll && !ps.Shared || p.Share > 0 && !ps.Permits {
		return nil, fmt.Errorf("%w: Share %d: the backend (%T) does not promise it", ErrMisconfigured, p.Share, s.b)
	}
	t, err := s.b.Take(ctx, Request{Key: key, Token: NewToken(), Join: TokensFrom(ctx), Share: p.Share, TTL: p.TTL, Wait: p.Wait, Route: p.Route, Trace: p.Trace})
	if err != nil {
		return nil, err
	}
	h := &servedHold{t: t, shared: p.Share != 0, released: make(chan struct{})}
	ls = NewLease(ctx, s, key, t.Token(), t.Fence(), h, s.ev)
	go func() {
		select {
		case <-t.Done():
			ls.h.lose(t.Err())
		case <-h.released:
		}
	}()
	LimitHold(ls, p.MaxHold)
	return ls, nil
}

// servedHold is a Taken as a lease's Hold.
type servedHold struct {
	t        Taken
	shared   bool
	released chan struct{} // closed by Release, which is called once
}

func (h *servedHold) Check() error { return h.t.Err() }

func (h *servedHold) Release(ctx context.Context) error {
	close(h.released)
	return h.t.Release(ctx)
}

func (h *servedHold) Shared() (int, bool) { return h.t.Slot(), h.shared }
