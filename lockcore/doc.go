// Package lockcore is what a lock engine implements, and nothing else:
// the keys that name resources, the sentinel errors, the Engine interface
// (what an acquisition asks, a Request, and what a hold gives back, a
// Hold), a declaration of what the engine promises (Promises), several
// holds in one exchange (Batch), the operator model (Operator, Info,
// Holder, Waiter, Revocation), gates (Gatekeeper) and telemetry (Events).
// It imports nothing but the standard library. The Redis engine is
// package lockcore/redisengine; an in-memory one, with the conformance
// suite every engine passes, is package lockcore/locktest.
//
// An engine is asked for a hold and gives one back. It never builds a
// lease: the Locker that is given it (lock.FromEngine) validates each
// Policy, mints owner tokens and passes on the propagated ones, re-enters
// in memory, makes each lease and its context, bounds it by MaxHold, ends
// it when its hold is lost, and calls its observers.
//
// # Keys
//
// A Key is a validated, escaped list of parts such as productID:42; NewKey
// escapes ':' and the bytes an engine reserves, so distinct part lists never
// share a key and user input cannot reach another namespace.
//
// # Owners and reentrancy
//
// Every fresh hold is owned by a token the Locker mints for it
// (Request.Token). A request carries the tokens of every live lock it
// holds, and those a propagated call brought from another process; an
// acquisition re-enters a hold owned by one of them (Request.Join) instead
// of waiting for it: in memory, above the engine, when the hold is this
// process's; in the engine otherwise, when it promises so
// (Promises.TokenReentry). A token never takes a free lock, so one that
// holds nothing grants nothing.
package lockcore
