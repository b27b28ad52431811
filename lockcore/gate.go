package lockcore

import (
	"context"
	"fmt"
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

// Open reports whether the gate is open by itself at now: its time is up.
func (g Gate) Open(now time.Time) bool { return !g.Until.IsZero() && !now.Before(g.Until) }

// Gatekeeper is implemented by an engine with gates: a resource whose gate
// is closed is refused by every engine on the same backend at once, by a
// check in memory before any call (the adapters answer 410 Gone /
// FailedPrecondition, without the handler) — the answer to a sold-out
// product that a million buyers still ask for. A gate closed on one engine
// closes on the others within a moment (milliseconds on one Redis), and
// the ones that missed it (their connection was down) learn of it when
// they reconnect; an engine learns the closed gates before its first
// acquisition is decided, so a new process refuses a closed resource from
// its first request. The gate refuses the acquisitions that take from the
// resource, exclusive ones and permits (Policy.Share n > 0); readers
// (ShareAll) pass it, as they only look, and so does a Policy with
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

	// GateOf returns the gate of key when this engine knows it closed, by
	// a lookup in memory.
	GateOf(key Key) (Gate, bool)

	// Gates returns the closed gates, as the backend has them.
	Gates(ctx context.Context) ([]Gate, error)
}

// CloseGate closes the gate of the resource of the innermost lock ctx
// holds, on the engine that took it, for d (0: until opened), as a handler
// does that finds the resource sold out; for a segment's lock
// (AcquireSegment), the gate of the whole resource. It fails with an error matching
// ErrInvalidKey when ctx holds no lock, ErrLockLost when the innermost
// lock is no longer held (released or lost: an outer lock's resource is
// not the one sold out), and ErrMisconfigured when its engine has no gates
// (is no Gatekeeper), when d is negative, and when the innermost lock was
// taken with others for one request (AcquireAll, keyfunc.Func.Also): which
// of them is sold out is for the caller to say, with the engine's
// CloseGate and the key.
func CloseGate(ctx context.Context, d time.Duration) error {
	h, err := innermost(ctx, "no gate to close")
	switch {
	case err != nil:
		return err
	case h.together:
		return fmt.Errorf("%w: the context holds %s with other resources taken together; close the gate of the one sold out by its key, with the engine's CloseGate", ErrMisconfigured, h.key)
	case d < 0:
		return fmt.Errorf("%w: a gate closed for %v", ErrMisconfigured, d)
	}
	g, ok := h.gates()
	if !ok {
		return fmt.Errorf("%w: the engine of %s (%T) has no gates", ErrMisconfigured, h.key, h.e)
	}
	key := h.key
	if base, _, ok := key.Segmented(); ok {
		key = base // the resource is sold out, not only the segment
	}
	return g.CloseGate(ctx, key, d)
}

// OpenGate opens the gate of the resource of the innermost lock ctx holds,
// on the engine that took it, as the handler of a route that restocks it
// does once the stock is back (Policy.Restock lets that route through the
// closed gate); for a resource split into segments, the closed segments'
// gates first (as the backend lists them: Gatekeeper.Gates), then the
// resource's, so that no request finds the resource open and every segment
// closed. Opening an open gate is no error. It fails as CloseGate does.
func OpenGate(ctx context.Context) error {
	h, err := innermost(ctx, "no gate to open")
	switch {
	case err != nil:
		return err
	case h.together:
		return fmt.Errorf("%w: the context holds %s with other resources taken together; open the gate of the one restocked by its key, with the engine's OpenGate", ErrMisconfigured, h.key)
	}
	g, ok := h.gates()
	if !ok {
		return fmt.Errorf("%w: the engine of %s (%T) has no gates", ErrMisconfigured, h.key, h.e)
	}
	key := h.key
	if base, _, ok := key.Segmented(); ok {
		key = base // the resource is restocked, not only the segment
	}
	gates, err := g.Gates(ctx)
	if err != nil {
		return err
	}
	for _, gt := range gates {
		if base, _, ok := gt.Key.Segmented(); ok && base == key {
			if err := g.OpenGate(ctx, gt.Key); err != nil {
				return err
			}
		}
	}
	return g.OpenGate(ctx, key)
}

// GateError returns the error of an acquisition of key that its closed
// gate refuses: it matches ErrGateClosed and names key.
func GateError(key Key) error {
	return fmt.Errorf("%w: %s", ErrGateClosed, key)
}

// gates returns the Gatekeeper of the engine that made h: for an Engine
// of Serve, its Backend's.
func (h *held) gates() (Gatekeeper, bool) {
	g := gatekeeperOf(h.e)
	return g, g != nil
}
