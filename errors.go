package lock

import "github.com/routelock/lock/lockcore"

// Errors, matched with errors.Is. They are the engine's (package lockcore):
// errors from either package match either name.
var (
	// ErrNotAcquired: the lock is held by another owner (fail fast, or the
	// wait ran out). HTTP 409, gRPC Aborted.
	ErrNotAcquired = lockcore.ErrNotAcquired
	// ErrWaitTimeout: a wait for the lock ran out. It matches ErrNotAcquired.
	ErrWaitTimeout = lockcore.ErrWaitTimeout
	// ErrUnavailable: Redis could not be reached. HTTP 503, gRPC Unavailable.
	ErrUnavailable = lockcore.ErrUnavailable
	// ErrLockLost: the cancellation cause of a handler's context when its
	// lease ended while the handler ran.
	ErrLockLost = lockcore.ErrLockLost
	// ErrMisconfigured: Redis says the Locker is set up wrongly (a wrong
	// password, a database out of range, a server too old), or a lock is on
	// a route that does not name its key. HTTP 500, gRPC Internal; Check
	// reports Redis's at startup.
	ErrMisconfigured = lockcore.ErrMisconfigured
	// ErrInvalidKey: a key part is empty, too long, or there are too many;
	// a request's key value is missing or invalid. HTTP 400, gRPC
	// InvalidArgument.
	ErrInvalidKey = lockcore.ErrInvalidKey
	// ErrInvalidToken: a propagated owner token is malformed.
	ErrInvalidToken = lockcore.ErrInvalidToken
	// ErrClosed: the Locker was closed.
	ErrClosed = lockcore.ErrClosed
)
