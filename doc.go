// Package lock gives routes declarative distributed locks on Redis: a
// route says which resource it touches, and the lock on that resource is
// held while the handler runs.
//
//	r := chi.NewRouter()
//	r.Use(lock.ByParam("productID"))  // locks every route with {productID}
//
// or, per route and with a policy:
//
//	locker := lock.New(rdb)
//	r.With(locker.ByParam("productID", lock.Wait(2*time.Second))).Post("/products/{productID}/buy", buy)
//	r.With(locker.ByParam("userID", lock.FailFast())).Post("/users/{userID}/checkout", checkout)
//
// A Locker locks gRPC methods too, with
// package interceptor, which sits beside this one so that a program that
// serves only HTTP links no gRPC:
//
//	rules := interceptor.Config{Rules: []interceptor.Rule{
//		interceptor.Method("/shop.Inventory/Reserve", interceptor.Field("product_id"), lock.Wait(time.Second)),
//		interceptor.Method("/shop.Orders/Create", interceptor.Field("order.user_id"), lock.FailFast()),
//	}}
//	grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.UnaryServer(locker, rules)))
//
// # Policies and options
//
// How a route or method locks is a Policy, the one shape a policy
// has from the route to the engine: Wait, FailFast, TTL and MaxHold each
// return one, and the zero Policy means the defaults. An Option (Defaults,
// Logger, Observe, Trace) configures a Locker and is accepted nowhere else. The rest of a
// route's configuration (the HTTP methods that lock, which callers may
// bring owner tokens, the response to a refusal) is middleware.Config's,
// and a gRPC server's is interceptor.Config's.
//
// # What a request sees
//
//	lock held by another owner, fail-fast or wait expired   409 Conflict, Retry-After
//	key missing or invalid (empty, too long, given twice)   400, handler not run
//	Redis unreachable                                       503, handler not run (fail closed)
//	caller went away while waiting                          wait aborted, nothing held
//	lease lost while the handler runs                       r.Context() cancelled, cause lockcore.ErrLockLost
//	hold reached its MaxHold while the handler runs         r.Context() cancelled, cause lockcore.ErrMaxHold; lock released
//	handler panics                                          lock released, the panic goes on
//
// A gRPC call sees Aborted (with a RetryInfo detail), InvalidArgument and
// Unavailable in the same places (package interceptor). The OnError of
// middleware.Config and interceptor.Config replaces those responses. The
// defaults are safe: a request waits up to 5 seconds for a busy lock
// (Wait, FailFast), leases last 10 seconds and are renewed while the
// handler runs (TTL), and nothing runs unlocked when Redis is down.
//
// # Keys name resources
//
// ByParam("productID") on /buy and on /refund locks the same productID:42,
// because both touch product 42. Package keyfunc has the other sources (a
// header, a query or form value, a JSON body field, a context value) and
// Join for keys of several parts; keyfunc.Func.As renames the resource. A
// key is always stated: a missing value is a 400, never one global lock.
//
// # Nested calls re-enter
//
// Every lock a request takes gets an owner token of its own. When a handler
// that holds productID:42 calls another service, or itself, through an
// http.Client whose Transport is middleware.Transport, the tokens of the
// locks it holds travel along, and a nested lock on productID:42 re-enters
// the held lock instead of waiting for it. Without the tokens the nested
// call waits like anyone else, and times out with 409. For gRPC,
// interceptor.UnaryClient carries the tokens, in metadata, in the same
// form, so a request re-enters its locks across HTTP and gRPC hops when
// routes and methods name the resource alike (keyfunc.Func.As). A token
// only re-enters the live hold it was minted for: a made-up or stale token
// grants nothing. The TrustToken of middleware.Config and
// interceptor.Config restricts which requests may bring tokens.
//
// # Inside the handler
//
// FencingToken(r.Context()) (or the gRPC handler's ctx) returns a number
// that grows with every fresh hold of the key: hand it to the store you
// write, so that a holder whose lease ended (a long GC pause, a partition)
// cannot overwrite a newer one. Keys(r.Context()) lists the keys held.
//
// # The default Locker
//
// The package-level ByParam and By use the Locker that SetDefault sets.
// Without SetDefault, they connect to the Redis named by the REDIS_URL
// (one server), REDIS_CLUSTER_URL (a Redis Cluster) or REDIS_SENTINEL_URL
// (a master behind Sentinel) environment variable, or to localhost:6379.
//
// # Packages
//
//	lock (this one)        the facade: New, FromEngine, Policy helpers, Locker options, ByParam & co.
//	middleware             the net/http middleware, on a Locker
//	interceptor            the gRPC interceptors, on a Locker
//	keyfunc                request → key parts (Param, Header, JSON, Field, …)
//	lockcore               what an engine implements: Key, errors, Engine, Request, Hold, Promises
//	lockcore/redisengine   the Redis engine that New makes
//	lockcore/locktest      an in-memory engine for tests, and the engines' conformance suite
//
// New locks with the Redis engine; FromEngine with any lockcore.Engine, such
// as the Redis engine made with options of your own, a wrapper around it or
// a test double.
package lock
