// Package middleware is routelock's net/http middleware: it locks the
// resource a request names while the handler runs. Most users reach it
// through the root package (lock.ByParam, Locker.By); this package is the
// implementation and the place for callers who assemble a Config by hand.
//
// # What a request goes through
//
//  1. The key function ([keyfunc.Func]) reads the resource from the request.
//     Under a router's own r.Use, a route that does not name the resource
//     passes through unlocked; a lock on one route whose pattern does not
//     name it, or a router-wide lock whose parameter no route of the router
//     names, is a configuration error (lockcore.ErrMisconfigured, 500); a
//     missing or invalid value is answered 400 and the handler never runs.
//     A router-wide lock matches the route the router will serve, after
//     chi's StripSlashes, CleanPath and URLFormat, before or after it; a
//     path no route matches for any method gets the router's NotFound
//     handler from the lock itself, so other middleware that rewrites the
//     path must come before the lock.
//  2. The owner token: a nested request carries its caller's token in the
//     Routelock-Token header (see [Transport]); the middleware accepts it from
//     requests that Config.TrustToken allows, and otherwise the engine mints
//     a fresh one.
//  3. The lock is taken by the Locker (a *lock.Locker, on the Redis engine
//     of lock.New or any other) with the route's Config.Policy: wait up to its Wait (never past the request's own
//     deadline) or fail at once. A lock held by another owner is answered
//     409 with Retry-After; Redis out of reach, 503. The handler runs only
//     with the lock held.
//  4. The handler runs with a context that carries the owner token and the
//     hold (lock.FencingToken, lock.Fences) and that is cancelled with
//     cause lockcore.ErrLockLost if the lease is lost.
//  5. The lock is released when the handler returns, and also when it
//     panics; the panic then goes on up the chain.
//
// A Policy with Segments takes the lock of one open segment of the
// resource (lifecycle.AcquireSegment) instead. The handler runs once: when
// it finds its segment exhausted, lock.NextSegment moves the request to
// another open segment in place, under the same context, or returns the
// error to answer with ([Error] answers 410 when no segment is left, 409
// when every open one stays busy).
//
// Responses for a refused request come from Config.OnError ([Error] by
// default). They never carry Redis errors, keys or owner tokens.
package middleware
