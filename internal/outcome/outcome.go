// Package outcome says, once for every adapter, which kinds of failure an
// error of a lock reports: Of matches it against lockcore's sentinels, the
// context package's errors and any sentinels of the adapter's own (those
// of the key functions), and returns the set of kinds it matches.
//
// The adapters answer with a table over that set: the HTTP status
// (middleware.Status), the gRPC code (interceptor.Status) and the telemetry
// outcome (lockotel). A table is a list of rows in the adapter's order of
// precedence; First picks the first row that shares a kind with the set.
// The set holds every kind an error matches, not only the first one, so
// that each adapter keeps its own order for an error that matches several
// (a joined error, or an engine's error next to a context error): HTTP
// answers a wait cut short by the request's context as the wait's result,
// gRPC as the call's cancellation, and the telemetry calls an engine that
// did not answer before the deadline unavailable.
//
// The package links nothing but lockcore and the standard library.
package outcome

import (
	"context"
	"errors"

	"github.com/routelock/lock/lockcore"
)

// Kind is a set of kinds of failure, each constant one bit of it; join
// kinds with |. The zero Kind is the empty set: nil, or an error that
// matches no sentinel below, which each table answers with its default.
// So are the errors of a hold that has ended (lockcore.ErrLockLost,
// lockcore.ErrRevoked, lockcore.ErrReleased) and lockcore.ErrNotHeld: no
// table tells them apart from an unknown error.
type Kind uint32

// The kinds. Those of lockcore's sentinels and the context errors are
// matched by Of itself; the others only when the adapter gives Of their
// sentinels.
const (
	// Busy: another owner holds the lock (lockcore.ErrNotAcquired,
	// lockcore.ContentionError).
	Busy Kind = 1 << iota
	// WaitTimeout: a wait for the lock ran out (lockcore.ErrWaitTimeout,
	// a ContentionError with TimedOut). Such an error is Busy too.
	WaitTimeout
	// Unavailable: the engine could not be reached or answered with an
	// error (lockcore.ErrUnavailable).
	Unavailable
	// Closed: the engine was closed (lockcore.ErrClosed).
	Closed
	// Misconfigured: the engine is set up wrongly, or a lock is on a route
	// that does not name its key (lockcore.ErrMisconfigured).
	Misconfigured
	// InvalidKey: a key part empty, too long or too many, or a key
	// function's missing or invalid value (lockcore.ErrInvalidKey, which
	// keyfunc.ErrMissing and keyfunc.ErrTooLarge match).
	InvalidKey
	// InvalidToken: an owner token not of the accepted form
	// (lockcore.ErrInvalidToken).
	InvalidToken
	// TooLarge: a body larger than a key function reads
	// (keyfunc.ErrTooLarge, an InvalidKey too); given by the HTTP
	// middleware, which answers it apart.
	TooLarge
	// NotFound: no route of the router matches the path (the HTTP
	// middleware's chiroute.ErrNoRoute); given by the adapter.
	NotFound
	// NotApplicable: a key function that does not apply to the call
	// (keyfunc.ErrSkip); given by the adapter.
	NotApplicable
	// Canceled: a context was cancelled (context.Canceled).
	Canceled
	// DeadlineExceeded: a context's deadline passed
	// (context.DeadlineExceeded).
	DeadlineExceeded
	// Upgrade: an exclusive lock asked for by a request that holds it
	// shared (lockcore.ErrUpgrade).
	Upgrade
	// GateClosed: a resource whose gate is closed, sold out
	// (lockcore.ErrGateClosed).
	GateClosed
)

// ContextEnded is the set of the context errors: Canceled and
// DeadlineExceeded.
const ContextEnded = Canceled | DeadlineExceeded

// Sentinel ties an error value to the kind an error that matches it
// (errors.Is) reports.
type Sentinel struct {
	// Err is the sentinel error.
	Err error
	// Kind is the kind it reports.
	Kind Kind
}

// sentinels are the errors Of matches by itself.
var sentinels = [...]Sentinel{
	{lockcore.ErrNotAcquired, Busy},
	{lockcore.ErrWaitTimeout, WaitTimeout},
	{lockcore.ErrUnavailable, Unavailable},
	{lockcore.ErrClosed, Closed},
	{lockcore.ErrMisconfigured, Misconfigured},
	{lockcore.ErrInvalidKey, InvalidKey},
	{lockcore.ErrInvalidToken, InvalidToken},
	{lockcore.ErrUpgrade, Upgrade},
	{lockcore.ErrGateClosed, GateClosed},
	{context.Canceled, Canceled},
	{context.DeadlineExceeded, DeadlineExceeded},
}

// Of returns every kind err reports: that of each of lockcore's sentinels
// and context errors that err matches (errors.Is), and that of each of
// more that it matches. Of(nil) is 0.
func Of(err error, more ...Sentinel) Kind {
	if err == nil {
		return 0
	}
	var k Kind
	for _, s := range sentinels {
		if errors.Is(err, s.Err) {
			k |= s.Kind
		}
	}
	for _, s := range more {
		if errors.Is(err, s.Err) {
			k |= s.Kind
		}
	}
	return k
}

// Has reports whether k holds any kind of of.
func (k Kind) Has(of Kind) bool { return k&of != 0 }

// Row is one row of an adapter's table: an error that reports any kind of
// Kinds is answered with To.
type Row[T any] struct {
	// Kinds are the kinds the row answers.
	Kinds Kind
	// To is the answer.
	To T
}

// First returns the answer of the first row of rows that shares a kind
// with k, and def when none does. The order of rows is the adapter's order
// of precedence for an error that reports several kinds.
func First[T any](k Kind, rows []Row[T], def T) T {
	for _, r := range rows {
		if k.Has(r.Kinds) {
			return r.To
		}
	}
	return def
}
