// Package lifecycle owns the leases of an engine's holds: the Policy of
// an acquisition, validated; the Lease a holder gets, whose context is
// cancelled with cause lockcore.ErrLockLost the moment its engine can no
// longer be sure of the hold, and with ErrReleased once released; owner
// tokens, minted for each fresh hold and carried in the context, with the
// protocol that carries them across HTTP and gRPC hops (Outbound,
// Intake); re-entry in memory (in-process re-entries share one hold,
// released in the engine with the last of them); MaxHold; several keys
// for one request (AcquireAll); segments; the acts on a resource's gate;
// and the Observer hook.
//
// Serve makes a Locker of a lockcore.Engine. The root package's Locker
// is built on it and shows its types (lock.Policy, lock.Lease,
// lock.Observer); the adapters take a Locker; no engine links this
// package (.ci/deps).
package lifecycle
