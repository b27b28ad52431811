// Package lockcore is what a lock is in routelock, whatever keeps it: keys
// that name resources, owner tokens and the locks a request holds in its
// context.Context, the Policy of an acquisition, the Lease a holder gets,
// the sentinel errors, and Engine, the one interface the HTTP middleware
// and the gRPC interceptors call. It imports no Redis client: the Redis
// engine is package lockcore/redisengine, and other engines (a quorum over
// independent masters, etcd, an in-memory engine in tests) sit beside it,
// each a Backend that Serve makes an Engine of; the doc of Backend says
// how to write one.
//
// # Keys
//
// A Key is a validated, escaped list of parts such as productID:42; NewKey
// escapes ':' and the bytes an engine reserves, so distinct part lists never
// share a key and user input cannot reach another namespace.
//
// # Owners and reentrancy
//
// Every fresh hold is owned by a token minted for it (NewToken), which the
// lease's context carries. Contexts carry the tokens of every live lock they
// hold, innermost first (TokensFrom), and those a propagated call brought
// (Intake reads them from the header or metadata value that Outbound
// wrote upstream); an acquisition re-enters a hold owned by one of them
// instead of waiting for it, in memory when the context descends from the
// lease (begin), in the backend otherwise. A token never takes a free lock, so
// one that holds nothing grants nothing. HeldFrom reads the locks a context
// holds, innermost first, each with its fencing token.
//
// # Leases
//
// A Lease wraps an engine's hold (Taken). Its context is cancelled with cause
// ErrLockLost the moment the engine can no longer be sure the hold is held,
// and with ErrReleased when it is released; in-process re-entries share one
// hold, which is released in the backend with the last of them.
package lockcore
