package lifecycle

import (
	"context"

	"github.com/routelock/lock/lockcore"
)

// An Observer watches a Locker's acquisitions, for telemetry (package
// lockotel's New returns one): the Locker calls it around each of them,
// and its Events hear what the engine does between and after them.
// lock.Observe attaches one to a Locker. It wraps no engine: what the
// engine offers besides (its Check, its operations, its gates) stays the
// engine's, found without looking through it.
type Observer interface {
	// Observe is called around one acquisition of keys with p: one key,
	// or several taken in one exchange with the backend (AcquireAll). It
	// calls acquire once, with ctx and p or p labelled (a Trace of its
	// own, say), and returns what acquire returned: the leases in the
	// order of keys, or an error. acquire may return no leases and no
	// error when the keys could not be taken in one exchange: nothing was
	// taken, and each is then acquired, and observed, on its own.
	Observe(ctx context.Context, keys []lockcore.Key, p Policy, acquire func(context.Context, Policy) ([]*Lease, error)) ([]*Lease, error)

	// Events returns what the Locker's engine is to tell of what it does
	// (see Events); an Observer that needs none returns nil.
	Events() lockcore.Events
}
