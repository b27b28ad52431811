package lockcore

// Promises is what an engine promises beyond mutual exclusion, as its
// Promises method returns it. What every engine does (exclusion, waiting
// and failing fast, withdrawal of a waiter that leaves, Events) is no
// promise: it is the contract. Re-entry in memory, MaxHold, several keys
// at once (AcquireAll) and segments are this package's, above every
// engine.
//
// The HTTP middleware and the gRPC interceptors refuse, when a route or
// method is built, a Policy the engine does not promise to serve (Share
// without Shared or Permits); the conformance suite (locktest.Run) checks
// each promise an engine makes, and only those.
type Promises struct {
	// FIFO: waiters get the lock in the order they began to wait, as
	// Events.Waiting reports them, except that a release may first hand
	// the hold to a waiter of its own engine, at most LocalHandOvers times
	// in a row.
	FIFO bool
	// LocalHandOvers bounds the hand-overs in memory that FIFO allows (0:
	// none).
	LocalHandOvers int
	// OrderedFences: each fresh hold of a key has a fencing token strictly
	// greater than every earlier hold's of that key.
	OrderedFences bool
	// TokenReentry: an owner token propagated to another process
	// (Outbound, Intake) re-enters there the hold it owns.
	TokenReentry bool
	// Shared: Request.Share -1 (readers) beside exclusive holds,
	// served in arrival order, and ErrUpgrade for a reader that asks for
	// the exclusive lock. An engine without it refuses such a Policy with
	// ErrMisconfigured.
	Shared bool
	// Permits: Policy.Share n > 0, each holder in a slot of its own. An
	// engine without it refuses such a Policy with ErrMisconfigured.
	Permits bool
	// Batch: the engine takes several holds, and gives several up, in one
	// exchange with its store (an Engine that is a Batch).
	Batch bool
	// Results: the engine keeps results beside its locks (an Engine that
	// is a Results), as idempotency keys need.
	Results bool
}
