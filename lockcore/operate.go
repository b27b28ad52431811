package lockcore

import (
	"context"
	"errors"
	"time"
)

// ErrNotHeld is returned by Operator.Revoke when nobody holds the lock.
var ErrNotHeld = errors.New("routelock: not held")

// ErrInvalidReason is matched by the error of Operator.Revoke for a reason
// that is empty, longer than 256 bytes, not UTF-8, or has control
// characters: the reason is kept in the audit record and shown to
// operators. Package admin and the routelock command refuse such a reason
// before they call Revoke.
var ErrInvalidReason = errors.New("routelock: invalid revoke reason")

// Operator is implemented by engines that can show and force-release their
// locks: what an operations tool (package admin, the routelock command)
// works with. The Redis engine implements it. Nothing it returns contains
// an owner token.
type Operator interface {
	// List returns the state of every held or awaited lock whose key
	// starts with prefix (an escaped key prefix such as "productID:";
	// "" lists all), in key order, at most limit of them (limit <= 0: no
	// limit). It reports whether there were more. It is a scan: the locks
	// may change while it runs.
	List(ctx context.Context, prefix string, limit int) (locks []Info, more bool, err error)

	// Inspect returns the state of one lock: the zero Info with Key set
	// when it is free and nobody waits.
	Inspect(ctx context.Context, key Key) (Info, error)

	// Revoke force-releases the hold of key, whoever holds it, for reason
	// (required: it is kept in the audit record). The hold's lease
	// contexts are cancelled with cause ErrRevoked at their next renewal at
	// the latest, the key's fencing token moves past the revoked hold's,
	// and the next waiter, if any, is granted the lock. It returns
	// ErrNotHeld when nobody holds the lock, and an error matching
	// ErrInvalidReason for a reason it does not accept.
	Revoke(ctx context.Context, key Key, reason string) (Revocation, error)
}

// RestartGuarder is implemented by an engine whose backend keeps a restart
// guard: after the backend restarts without its data, it takes no fresh
// lock for a while, and every acquisition meanwhile fails with a
// *RestartGuardError (ErrRestartGuard). An operations tool (package admin,
// the routelock command) asks an Operator that is one, so that an
// operator sees why no lock is taken. The Redis engine implements it.
type RestartGuarder interface {
	// RestartGuard returns how long the restart guard still refuses fresh
	// locks: 0 when it does not.
	RestartGuard(ctx context.Context) (time.Duration, error)
}

// Info is the state of one lock, as an Operator read it.
type Info struct {
	// Key is the lock's key, escaped (Key.String).
	Key string
	// Holders are the owners holding the lock: one for a lock held
	// exclusively, one per owner for a shared one (Policy.Share), none for
	// a free one.
	Holders []Holder
	// Fence is the fencing token of the current hold (the newest one of a
	// shared lock), 0 when free.
	Fence int64
	// LastFence is the key's last fencing token: no fencing token issued
	// for the key is above it. 0 if none is remembered.
	LastFence int64
	// TTL is the hold's remaining lease; 0 when free.
	TTL time.Duration
	// Waiters are the queued acquisitions, first in line first.
	Waiters []Waiter
	// Audit holds the latest force-releases of the key, newest first.
	Audit []Revocation
}

// Holder is one owner of a hold. It names the owner by where it is, never
// by its token.
type Holder struct {
	// Owner identifies the owner without revealing its token: a short
	// digest, equal for the entries of one owner.
	Owner string
	// Count is how many acquisitions hold it (re-entries by other
	// processes included; in-memory re-entries count once).
	Count int
	// Instances are the engines (processes) that acquired it, by their
	// engine ids.
	Instances []string
	// Names are the instance names of Instances, in the same order, as
	// their engines were named (the Redis engine's Options.Name, by
	// default "<hostname>-<pid>"); "" where the backend does not know it
	// (an engine whose record expired).
	Names []string
	// Route is the route template or gRPC method (Policy.Route) of the
	// acquisition that took the hold, "" when not known. The Redis engine
	// learns it from the engine that took the hold a moment after it was
	// taken (see its Options.Name): a hold held briefly shows none.
	Route string
	// Trace is the trace id (Policy.Trace) of the request that took the
	// hold, "" when none or not known (see Route).
	Trace string
	// Since is when the hold was taken; zero when the backend does not
	// know. The Redis engine reads it from Redis's clock when the hold was
	// granted to a waiter, and from the clock of the engine that took it
	// when the lock was free.
	Since time.Time
	// Fence is the hold's fencing token.
	Fence int64
	// Share is the Policy.Share the hold was taken with: 0 for an
	// exclusive hold, n for one of n permits, -1 for a reader.
	Share int
	// Slot is the hold's slot among the key's permits; -1 for none.
	Slot int
}

// Waiter is one queued acquisition.
type Waiter struct {
	// Instance is the engine (process) that waits, by its engine id.
	Instance string
	// Name is Instance's instance name (see Holder.Names); "" when not
	// known.
	Name string
	// Route and Trace are the route template or gRPC method and the trace
	// id of the waiting acquisition (Policy.Route, Policy.Trace), "" when
	// none or not known (see Holder.Route).
	Route, Trace string
	// Since is when it queued, by the backend's clock.
	Since time.Time
	// Deadline is when it gives up waiting.
	Deadline time.Time
	// Share is the Policy.Share it waits with (see Holder.Share).
	Share int
}

// Revocation is the audit record of one force-release.
type Revocation struct {
	// Key is the lock's key, escaped.
	Key string
	// Owner is the revoked hold's owner digest (Holder.Owner).
	Owner string
	// Fence is the revoked hold's fencing token; NewFence the key's last
	// fencing token after the revocation, above every token the revoked
	// hold could show. A hold that an engine handed over in memory from
	// the revoked one before the revocation reached it (the Redis
	// engine's LocalHandOvers) is revoked with it, and its fencing token
	// lies between the two.
	Fence, NewFence int64
	// Reason is the operator's reason.
	Reason string
	// At is when it happened, by the backend's clock.
	At time.Time
}
