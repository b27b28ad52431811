// Package interceptor locks gRPC methods: server interceptors that hold a
// lock from a Locker (a *lock.Locker, on the Redis engine or any other) on
// the resource a call names while its handler runs, and client interceptors that carry the caller's owner token
// to the next service, so that nested calls re-enter instead of deadlocking.
//
// Rules map methods to keys and policies (lock.Policy, which package
// lock's Wait, FailFast and TTL return):
//
//	c := interceptor.Config{Rules: []interceptor.Rule{
//		interceptor.Method("/shop.Inventory/Reserve", interceptor.Field("product_id").As("productID"), lock.Wait(time.Second)),
//		interceptor.Method("/shop.Orders/Create", interceptor.Field("order.user_id"), lock.FailFast()),
//	}}
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(interceptor.UnaryServer(l, c)),
//		grpc.ChainStreamInterceptor(interceptor.StreamServer(l, c)),
//	)
//
// For each call of a method with a rule, the server interceptor:
//
//  1. takes a propagated owner token from routelock-token metadata, if the call
//     may carry one (Config.TrustToken), and removes it from the metadata
//     the handler sees;
//  2. derives the key from the request (Field, Metadata, keyfunc.Context,
//     keyfunc.Join); a bad key ends the call with codes.InvalidArgument
//     and the handler does not run;
//  3. acquires the lock with the rule's Policy, waiting up to its Wait (and never past the call's
//     deadline) or failing fast: codes.Aborted when it stays held by
//     another owner, codes.Unavailable when Redis cannot be reached;
//  4. runs the handler with the lease's context: it carries the owner
//     token (UnaryClient forwards it), the fencing token
//     (lock.FencingToken, lock.Fences), and is cancelled with cause
//     lockcore.ErrLockLost if the lease is lost;
//  5. releases the lock when the handler returns or panics, and lets the
//     panic go on up the chain.
//
// A rule whose Policy has Segments takes the lock of one open segment of
// the resource (lifecycle.AcquireSegment) instead; a handler that finds
// its segment exhausted moves on with lock.NextSegment, in place, and
// ends the call with [Status] of its error when that fails
// (FailedPrecondition when no segment is left, Aborted when every open
// one stays busy).
//
// Idempotency is another unary server interceptor, for methods that must
// run once however often a call is sent: a call with idempotency-key
// metadata runs once per key, method and caller; duplicates that come
// while it runs wait for it on the key's lock, and retries get its stored
// reply (or error status), marked with idempotent-replayed: true metadata.
// The engine must keep results (lockcore.Results: the Redis engine does).
//
// The token is the one the HTTP middleware uses (the Routelock-Token
// header), so a chain of HTTP and gRPC calls for one request re-enters
// one lock when its routes and methods name the resource alike (see
// keyfunc.Func.As).
package interceptor
