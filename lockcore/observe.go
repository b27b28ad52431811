package lockcore

import (
	"context"
	"time"
)

// Events receives what an engine does between and after its Take calls,
// and the Locker the ends of the holds, for telemetry (package lockotel
// implements it). An engine that
// reports events takes an Events in its options (redisengine.Options.Events);
// a nil Events costs the engine nothing.
//
// Methods are called synchronously from the engine's goroutines, often with
// its internal state in flight: they must be fast, must not block and must
// not call back into the engine. A key's values are the request's data:
// an implementation that records them must say so to its users.
type Events interface {
	// Waiting is called with +1 when an acquisition of key starts waiting
	// for another owner's hold, and with -1 when that wait ends, however
	// it ends.
	Waiting(key Key, delta int)

	// Woken is called each time a waiting acquisition of key wakes to ask
	// the backend again or to take a grant it was handed, saying what woke
	// it; by is one of:
	//   - "message": a notification that the lock was released or granted;
	//   - "reply": the backend's answer to an earlier call (a retry after a
	//     refused or unanswered call, or a grant found in a reply);
	//   - "timer": the waiter's own timer, set by the holder's remaining
	//     lease or the engine's polling interval, ran out;
	//   - "memory": a release in the same process handed the lock over
	//     in memory, without the backend (the Redis engine's
	//     LocalHandOvers).
	Woken(key Key, by string)

	// Renewed is called with the outcome of each renewal of a hold of key:
	// nil when the lease was extended, an error matching ErrLockLost when
	// the hold was found gone (ErrRevoked when it was force-released), or
	// one matching ErrUnavailable when the backend did not answer.
	Renewed(key Key, err error)

	// Ended is called once per fresh hold (not per in-memory re-entry;
	// a lease that moved to another segment, lock.NextSegment, is one
	// hold, told of with the key it holds at its end), when it ends:
	// after its backend release returned, with cause ErrReleased and the
	// release's error (nil, or matching
	// ErrUnavailable when the release goes on in the background), or when
	// it was lost, with the cause of its loss (matching ErrLockLost;
	// ErrRevoked when it was force-released, also when its backend release
	// found that) and a nil err. held is how long the hold lasted, release
	// how long its backend release took (0 for a loss found before a
	// release). ctx is the release's context, or for a loss found before a
	// release the lease's own: the request's values, such as its trace
	// span, are in it. A loss is reported before the lease's context is
	// cancelled, and so before the Release of the lost hold returns, so
	// that what an implementation records on the request's span lands
	// before the request ends.
	//
	// The Locker makes these calls, for every engine, to its observers'
	// Events (lock.Observe): an engine tells Ended nothing itself.
	Ended(ctx context.Context, key Key, held, release time.Duration, cause, err error)
}
