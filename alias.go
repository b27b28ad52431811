package lock

import "github.com/routelock/lock/internal/lifecycle"

// Policy says how a route or method acquires its lock: the wait, the
// lease, a ceiling on the hold, sharing, segments, restock. Wait,
// FailFast, TTL, MaxHold, Shared, Permits, Segments and Restock each
// return one; a route's Policy is the fields they set over its Locker's
// Defaults (each field the last non-zero one given). Its zero value is
// the default: wait up to 5 seconds, the engine's lease, no ceiling.
type Policy = lifecycle.Policy

// Lease is a held lock, as Locker.Acquire returns it. Its Context is
// cancelled, with a cause matching lockcore.ErrLockLost, if the lease is
// lost while held; Fence is its fencing token. Release it exactly once.
// Handlers behind the middleware and interceptors do not see their lease:
// their request's context is its Context.
type Lease = lifecycle.Lease

// Observer watches a Locker's acquisitions, for telemetry: package
// lockotel's New returns one, given to the Observe option.
type Observer = lifecycle.Observer
