package lockcore

import (
	"context"
	"time"
)

// Engine takes holds in a lock service. It never builds a lease,
// re-enters in memory, mints a token or bounds a hold's time: it is asked
// for a hold and gives one back, and the Locker that is given it
// (lock.FromEngine) does the rest. An engine may be a value of any type;
// Lockers given one engine share its holds (a request re-enters through
// one what it holds through another) when its dynamic type is comparable:
// use a pointer.
type Engine interface {
	// Take takes r.Key for r.Token, or re-enters a hold that one of
	// r.Join owns (Promises.TokenReentry), waiting up to r.Wait
	// (FailFast: not at all) and never past ctx. Its errors match:
	// a *ContentionError (ErrNotAcquired, ErrWaitTimeout), with ctx.Err()
	// when ctx ended the wait; ErrUnavailable; ErrClosed. On error nothing
	// is held. An engine with gates (Gatekeeper) refuses a closed one
	// with ErrGateClosed, unless r.GateChecked: the Locker asked GateOf
	// just before.
	Take(ctx context.Context, r Request) (Hold, error)
	// Promises says what the backend promises beyond mutual exclusion;
	// the Locker refuses a Share it does not promise before Take is
	// called.
	Promises() Promises
	// Close stops the backend: its waiters fail with ErrClosed and its
	// holds are lost.
	Close() error
}

// Request is one acquisition as an Engine is asked for it: its Policy
// validated, its wait filled in, its owner token minted.
type Request struct {
	Key   Key
	Token string   // the owner token of a fresh hold
	Join  []string // propagated owner tokens whose hold it may re-enter
	Share int      // 0: exclusive; n > 0: one of n permits; -1: a reader, one of any number
	// TTL is the lease length, or 0 for the backend's default.
	TTL time.Duration
	// Wait is FailFast or positive.
	Wait         time.Duration
	Route, Trace string // labels for operators (Policy.Route, Policy.Trace)
	// Restock is Policy.Restock: the acquisition passes a closed gate.
	Restock bool
	// GateChecked: the Locker found the key's gate open just before
	// (Gatekeeper.GateOf), so Take need not look at it. It is false when
	// the Locker does not know the engine's gates, as for an engine
	// wrapped by one that is no Gatekeeper: an engine with gates then
	// refuses a closed one in Take itself (ErrGateClosed).
	GateChecked bool
	// Set: the acquisition is one of several for one request (several
	// resources, or segments), whose hold may be given back before any handler
	// sees it, when another of the set fails.
	Set bool
	// Result: the acquisition is for a request that runs once per key (an
	// idempotency key). An engine that keeps results (Promises.Results)
	// takes nothing when a result is stored for Key, when Take is called
	// or while it waits: Take fails with a *ResultFound that carries it.
	// Engines that keep no results ignore it.
	Result bool
}

// Hold is a hold an Engine took. Its methods do not block, but Release
// and, briefly, Token.
type Hold interface {
	Fence() int64
	// Shared reports whether the hold is one of several owners' at once
	// (a reader's or a permit's), and its slot among the key's permits:
	// 0..n-1 for Share n > 0, -1 for none. A hold that re-entered another
	// by token is shared as that one is.
	Shared() (slot int, ok bool)
	// Token is the hold's owner token: the Request's, or the one of its
	// Join it re-entered. The Locker reads it when the token may leave the
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

// Batch is an Engine that takes several holds, and gives several up, in
// one exchange with its store; it declares so with Promises.Batch.
type Batch interface {
	Engine
	// TakeAll takes the holds of rs, at least two, their keys distinct
	// and sorted by Key.String, all or none. It returns nil holds and a
	// nil error, having taken nothing, when it cannot take them so;
	// the Locker then takes them one by one. When the Wait is FailFast it may
	// fail with the *ContentionError of a key it found held.
	TakeAll(ctx context.Context, rs []Request) ([]Hold, error)
	// ReleaseAll releases holds of this Engine that their holders
	// released, as their Release methods would, each once, and returns
	// each one's error in order.
	ReleaseAll(ctx context.Context, ts []Hold) []error
}

// FailFast, as Policy.Wait, makes one attempt: a lock held by another
// owner fails at once, with a ContentionError that did not time out. It
// is the one negative Wait a Policy may have.
const FailFast time.Duration = -1
