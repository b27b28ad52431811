package lockcore

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Match them with [errors.Is]; the errors of engines wrap
// them, and wrap the backend's own error where there is one.
//
// Every error and panic of this module reads "routelock: " and then what
// went wrong, with that prefix once: the sentinels carry it, and an error
// that wraps one of them puts it first and its own details after it
// (fmt.Errorf("%w: part %d is empty", ErrInvalidKey, i)), whichever
// package made it; an error of the module that names where it arose says
// so with a qualified name after the prefix ("routelock: keyfunc.Join of
// nothing"), not with a prefix of its own.
var (
	// ErrNotAcquired means the lock is held by another owner and the policy
	// gave up: a fail-fast attempt, or a wait that ended (see ErrWaitTimeout).
	ErrNotAcquired = errors.New("routelock: not acquired: held by another owner")

	// ErrWaitTimeout means a blocking acquisition used up its wait budget or
	// reached the caller's deadline. It matches ErrNotAcquired as well.
	ErrWaitTimeout error = &derived{"routelock: wait timed out: held by another owner", ErrNotAcquired}

	// ErrLockLost is the cancellation cause of a lease's context when the
	// lease ended while it was meant to be held: it expired, was deleted or
	// taken over, Redis restarted, or renewals failed for too long.
	ErrLockLost = errors.New("routelock: lease lost")

	// ErrUnavailable means the backend (Redis) could not be reached or
	// answered with an error; the lock state is unknown and nothing is held
	// by the caller.
	ErrUnavailable = errors.New("routelock: lock service unavailable")

	// ErrRestartGuard means the backend restarted lately without its data
	// (Redis without an append-only file) and refuses fresh holds until
	// every lease granted before the restart could have ended: a holder
	// from before it may still run. Nobody need hold the lock. It matches
	// ErrUnavailable too, and comes as a *RestartGuardError, which says
	// how long the refusal lasts; the adapters answer 503 with Retry-After
	// / Unavailable.
	ErrRestartGuard error = &derived{"routelock: restart guard: the lock service restarted without its data and takes no lock until every earlier lease has ended", ErrUnavailable}

	// ErrRevoked is the cancellation cause of a lease's context when an
	// operator force-released the hold (Operator.Revoke). It matches
	// ErrLockLost too.
	ErrRevoked error = &derived{"routelock: lease revoked by an operator", ErrLockLost}

	// ErrMaxHold is the cancellation cause of a lease's context when its
	// hold reached the ceiling its Policy's MaxHold set, and was released
	// for the next owner while its handler may still run. It matches
	// ErrLockLost too.
	ErrMaxHold error = &derived{"routelock: lease held for its MaxHold and released", ErrLockLost}

	// ErrUpgrade means an acquisition asked for the exclusive lock on a
	// key that its own request holds shared (Policy.Share), in this
	// process or, by a propagated owner token, in another one: it would
	// wait for itself, so it fails at once. It does not match
	// ErrNotAcquired: a retry never succeeds. The adapters answer 409
	// Conflict without Retry-After / FailedPrecondition.
	ErrUpgrade = errors.New("routelock: exclusive lock asked for by a shared holder of it")

	// ErrGateClosed means the resource's gate is closed (Gatekeeper): it
	// is sold out, or an operator closed it, and every acquisition of it
	// fails at once, without a call to the backend, until the gate's time
	// is up or it is opened again. It does not match ErrNotAcquired: a
	// retry does not help while the gate is closed. The adapters answer
	// 410 Gone / FailedPrecondition, and run no handler.
	ErrGateClosed = errors.New("routelock: gate closed")

	// ErrMisconfigured means the backend answered that the engine is set
	// up wrongly: a wrong password or user, a database index out of range,
	// a server too old for the engine's commands. Key functions return it
	// for a lock on a route that does not name its key. Unlike
	// ErrUnavailable it does not pass by itself; the adapters answer 500 /
	// Internal.
	ErrMisconfigured = errors.New("routelock: misconfigured")

	// ErrInvalidKey means a key part was empty, too long, or there were too
	// many parts. Key functions return it for a request whose value is
	// missing or invalid; the adapters answer 400 / InvalidArgument.
	ErrInvalidKey = errors.New("routelock: invalid key")

	// ErrInvalidToken means an owner token is not of the accepted form.
	ErrInvalidToken = errors.New("routelock: invalid owner token")

	// ErrReleased is returned by a second Release of the same lease.
	ErrReleased = errors.New("routelock: lease already released")

	// ErrClosed means the engine (the Locker that made it) was closed.
	ErrClosed = errors.New("routelock: locker closed")
)

// derived is a sentinel error that matches another one (Unwrap) without
// repeating its text, so that its own reads with the prefix once.
type derived struct {
	msg    string
	parent error
}

func (d *derived) Error() string { return d.msg }
func (d *derived) Unwrap() error { return d.parent }

// ContentionError is returned when the lock is held by another owner. It
// matches ErrNotAcquired, and ErrWaitTimeout when a wait ran out, and carries
// a hint for when a retry may succeed.
type ContentionError struct {
	// Key is the lock key (the escaped resource, without the engine's
	// prefix).
	Key string
	// RetryAfter is when a retry may succeed, as the engine estimates it.
	// The Redis engine says how long its recent holds of the resource (the
	// key's first part) lasted, as an exponentially weighted mean, and
	// never more than the holder's remaining lease; while it knows none
	// (no hold of the resource has ended in this process yet), 100ms, or
	// the remaining lease if that is shorter: a short first retry, which
	// a client backs off from, rather than the whole lease, which the
	// holder's renewals extend and which says nothing of when it is done.
	// The in-memory engine (package locktest) does the same per key. Over
	// HTTP the middleware sends it as Retry-After in whole seconds,
	// rounded up: 1 for 100ms; over gRPC it is the RetryInfo's delay as
	// is.
	RetryAfter time.Duration
	// TimedOut reports that a wait ran out: the error then matches
	// ErrWaitTimeout too.
	TimedOut bool
}

func (e *ContentionError) Error() string {
	return fmt.Sprintf("%v (key %q)", e.Unwrap(), e.Key)
}

// Unwrap returns the sentinel: ErrWaitTimeout when TimedOut, else
// ErrNotAcquired.
func (e *ContentionError) Unwrap() error {
	if e.TimedOut {
		return ErrWaitTimeout
	}
	return ErrNotAcquired
}

// RestartGuardError is returned while the backend's restart guard refuses
// fresh holds (ErrRestartGuard, which it matches, with ErrUnavailable).
type RestartGuardError struct {
	// RetryAfter is how long the guard still refuses them.
	RetryAfter time.Duration
}

func (e *RestartGuardError) Error() string {
	return fmt.Sprintf("%v (%v more)", ErrRestartGuard, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap returns ErrRestartGuard.
func (e *RestartGuardError) Unwrap() error { return ErrRestartGuard }
