package lockcore

import (
	"context"
	"time"
)

// Gate is the closed gate of a resource: from Since, every acquisition of
// its key fails at once with ErrGateClosed, without a call to the
// backend, until Until (when it opens by itself) or until it is opened.
type Gate struct {
	Key   Key
	Since time.Time // when it was closed
	Until time.Time // when it opens by itself; zero: only when opened
}

// Gatekeeper is implemented by an engine with gates: a resource whose gate
// is closed is refused by every engine on the same backend at once, by
// the Locker's one check in memory (GateOf) before the engine is asked (the adapters answer 410 Gone /
// FailedPrecondition, without the handler) — the answer to a sold-out
// product that a million buyers still ask for. A gate closed on one engine
// closes on the others within a moment (milliseconds on one Redis), and
// the ones that missed it (their connection was down) learn of it when
// they reconnect; an engine learns the closed gates before its first
// acquisition is decided, so a new process refuses a closed resource from
// its first request. The gate refuses the acquisitions that take from the
// resource, exclusive ones and permits (Request.Share n > 0); readers
// (Share -1) pass it, as they only look, and so does a Policy with
// Restock, which restocks the resource and reopens the gate (OpenGate). An
// acquisition that re-enters in memory a hold of its own request is not
// refused; one that would re-enter it by a propagated token (a nested call
// to another service) is, as any other. Waiters queued before the gate
// closed are not: they get the lock in turn.
type Gatekeeper interface {
	// CloseGate closes the gate of key for d, or until opened when d is
	// 0. Closing a closed gate sets its new time.
	CloseGate(ctx context.Context, key Key, d time.Duration) error

	// OpenGate opens the gate of key; it is no error when it is open.
	OpenGate(ctx context.Context, key Key) error

	// GateOf returns the gate of key and an error matching ErrGateClosed
	// that names key, when it is closed, by a lookup in memory (an engine
	// may make the error once per gate, so that refusing a sold-out
	// resource allocates nothing); and the zero Gate and nil when it is
	// open. An engine that has not learnt the closed gates from its
	// backend yet learns them first, within ctx: the Locker asks before
	// each acquisition that a gate refuses (not a reader's, not a
	// restock's) and before none of its Take calls, which need not look
	// at gates. Other errors (ErrUnavailable: the backend did not answer;
	// ErrClosed) refuse the acquisition as Take's would.
	GateOf(ctx context.Context, key Key) (Gate, error)

	// Gates returns the closed gates, as the backend has them.
	Gates(ctx context.Context) ([]Gate, error)
}
