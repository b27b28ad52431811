package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/routelock/lock/lockcore"
)

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
		return fmt.Errorf("%w: the context holds %s with other resources taken together; close the gate of the one sold out by its key, with the engine's CloseGate", lockcore.ErrMisconfigured, h.at().key)
	case d < 0:
		return fmt.Errorf("%w: a gate closed for %v", lockcore.ErrMisconfigured, d)
	}
	g, ok := h.gates()
	if !ok {
		return fmt.Errorf("%w: the engine of %s (%T) has no gates", lockcore.ErrMisconfigured, h.at().key, h.e)
	}
	key := h.at().key
	if base, _, ok := Segmented(key); ok {
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
		return fmt.Errorf("%w: the context holds %s with other resources taken together; open the gate of the one restocked by its key, with the engine's OpenGate", lockcore.ErrMisconfigured, h.at().key)
	}
	g, ok := h.gates()
	if !ok {
		return fmt.Errorf("%w: the engine of %s (%T) has no gates", lockcore.ErrMisconfigured, h.at().key, h.e)
	}
	key := h.at().key
	if base, _, ok := Segmented(key); ok {
		key = base // the resource is restocked, not only the segment
	}
	gates, err := g.Gates(ctx)
	if err != nil {
		return err
	}
	for _, gt := range gates {
		if base, _, ok := Segmented(gt.Key); ok && base == key {
			if err := g.OpenGate(ctx, gt.Key); err != nil {
				return err
			}
		}
	}
	return g.OpenGate(ctx, key)
}

// GateError returns the error of an acquisition of key that its closed
// gate refuses: it matches ErrGateClosed and names key.
func GateError(key lockcore.Key) error {
	return fmt.Errorf("%w: %s", lockcore.ErrGateClosed, key)
}

// gates returns the Gatekeeper of the engine that made h.
func (h *held) gates() (lockcore.Gatekeeper, bool) {
	g := GatesOf(h.e)
	return g, g != nil
}
