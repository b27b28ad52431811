// Package lockotel reports routelock's locks to OpenTelemetry: a span for
// every acquisition and every release, an event on the request's span when
// its lock is lost or revoked, and metrics of acquisitions, holds, waits,
// losses, renewals and wake-ups. It is opt-in, per Locker:
//
//	tel := lockotel.New(lockotel.Config{TracerProvider: tp, MeterProvider: mp})
//	locker := lock.New(rdb, lock.Observe(tel))
//
// Without a TracerProvider or a MeterProvider in its Config it uses the
// global providers (otel.GetTracerProvider, otel.GetMeterProvider) as they
// are when New is called; they delegate to the providers a program sets
// later. lockotel never sets them. Its tracer and meter have the
// instrumentation scope github.com/routelock/lock/lockotel, its import
// path: the name to select its instruments by, in a view for instance.
//
// New returns a lock.Observer. With lock.Observe(tel) the Locker calls
// tel around each acquisition (spans and metrics of each), tells
// tel.Events() of each hold's end (releases, losses) and, for lock.New,
// gives tel.Events() to the Redis engine (waits, renewals, wake-ups). For
// lock.FromEngine, give tel.Events() to the engine's own events option
// for those, as redisengine.Options.Events. tel wraps no engine: the Locker's Check,
// Operator and gates stay its engine's. The metric routelock.held counts
// up around each acquisition and down in its Events' Ended, so it is right
// only when the engine's Events reach the same telemetry.
//
// # Spans
//
// lock.acquire, a child of the span in the context given to Acquire (the
// request's), ending when Acquire returns. The lock's context, and so the
// handler's, keeps the request's span as its current span. Attributes:
//
//	lock.resource   the key's resource name (lockcore.Key.Name): productID
//	lock.route      the route template or gRPC method (lock.Policy.Route)
//	lock.mode       wait | fail_fast
//	lock.outcome    acquired | busy | wait_timeout | cancelled | unavailable | upgrade | gate_closed | result | error
//	lock.share      the Policy's Share, for a shared acquisition: n permits, -1 readers
//	lock.slot       the hold's slot among its permits, when it has one
//	lock.wait       seconds spent in Acquire
//	lock.reentered  whether it re-entered a hold of the request's owner instead
//	                of taking the lock afresh: in memory, or by an owner token
//	                propagated from another process (lock.Lease.Reentered)
//	lock.fence      the fencing token, when acquired
//	lock.key        the whole key (productID:42), only with Config.KeyValues
//
// with an event lock.granted when acquired, and status Error for
// unavailable and error. busy is a lock held by another owner with no wait
// (fail fast) and wait_timeout a wait that ran out; cancelled is a request
// whose context ended (cancelled, or its deadline passed) before it got
// the lock; unavailable is an engine that did not answer or was closed
// (lockcore.ErrUnavailable, lockcore.ErrClosed); upgrade an exclusive
// acquisition by a request that holds the lock shared (lockcore.ErrUpgrade);
// gate_closed a resource whose gate is closed, sold out
// (lockcore.ErrGateClosed), refused without a call to the backend;
// result an idempotent request that found its stored result rather than
// the lock, when it came or while it waited (lockcore.ResultFound);
// error is anything else
// (a misconfigured engine, an invalid key).
//
// lock.release, a child of the span in the release's context (the
// request's), from the start of the backend release to its end:
// lock.resource, lock.outcome (released, or unavailable when the backend
// did not confirm the release, which then completes in the background or
// by expiry), lock.held (seconds from grant to release), and lock.key with
// Config.KeyValues.
//
// When a hold is lost while its handler runs, the request's span (the
// current span of the lease's context) gets an event lock.lost, or
// lock.revoked when an operator force-released it, with lock.resource and
// lock.reason. It lands while that span is still open even when the
// handler returns the moment its context ends: the adapters release the
// lock before the request ends, and an engine tells of a loss before the
// release of the lost hold returns (the Redis engine's release waits for
// it).
//
// # Metrics
//
//	routelock.acquire.duration  histogram, s        lock.resource, lock.route, lock.outcome
//	routelock.hold.duration     histogram, s        lock.resource
//	routelock.held              observable up-down  lock.resource: holds live now
//	routelock.waiting           observable up-down  lock.resource: acquisitions waiting now
//	routelock.lost              counter             lock.resource, lock.reason
//	routelock.renewals          counter             lock.resource, lock.outcome: ok | lost | revoked | unavailable | error
//	routelock.wakeups           counter             lock.resource, lock.source: message | reply | timer
//	routelock.idempotency.requests  counter         lock.route, lock.outcome: stored | not_stored | lost | replayed | conflict | mismatch
//	routelock.idempotency.stored    counter, By     lock.route: bytes of results stored
//
// routelock.held and routelock.waiting are counted with an atomic add per
// resource and reported when a reader collects, so a request pays no
// measurement for them; resources met after 4096 attribute sets are counted
// together under lock.resource _other.
//
// lock.reason says why a hold was lost: revoked (force-released by an
// operator, lockcore.ErrRevoked), expired (the engine could not renew it
// in time: its cause matches lockcore.ErrUnavailable as well), closed (the
// engine was closed under it, lockcore.ErrClosed), max_hold (it reached
// its route's MaxHold and was released for the next owner,
// lockcore.ErrMaxHold), or gone (the backend no longer has it, or another
// owner does: any other loss).
//
// # What is recorded
//
// Spans and metrics name a lock by its resource and route: names from the
// program's configuration, such as productID and /products/{productID}/buy,
// so that the attributes of metrics stay bounded. A key's values (42) are
// request data and appear only as the span attribute lock.key, and only
// with Config.KeyValues; never in metrics. Owner tokens, error messages and
// other request data are never recorded.
//
// Redis's own spans are another matter: go-redis's tracing
// (github.com/redis/go-redis/extra/redisotel/v9) records every command with
// its arguments by default, owner tokens included; turn that off with
// redisotel.InstrumentTracing(rdb, redisotel.WithDBStatement(false)).
//
// # Dependencies
//
// lockotel depends on the OpenTelemetry API only (go.opentelemetry.io/otel,
// otel/trace, otel/metric, otel/attribute), never on its SDK, at the
// version that google.golang.org/grpc, which routelock requires, requires
// too. It is a package of routelock's module rather than a module of its
// own because those modules are already in the module graph of every
// program that uses routelock: depending on them brings a program no new
// module, and a program that does not import lockotel links none of it.
package lockotel
