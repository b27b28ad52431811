package lock

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// Option configures a Locker: give it to New or FromEngine. How a route
// or gRPC method locks is a Policy instead (Wait, FailFast, TTL,
// MaxHold),
// given to the route or method; Defaults sets the Locker's.
type Option struct{ apply func(*Locker) }

// Wait makes a request wait up to d for a lock held by another owner, and
// never past the request's own deadline; then it is refused with 409
// Conflict (codes.Aborted for gRPC). The default, the zero Policy, waits
// up to 5 seconds. Give it to a route or method, or to Defaults:
//
//	r.With(locker.ByParam("productID", lock.Wait(2*time.Second))).Post("/products/{productID}/buy", buy)
//
// Panics if d is not positive; use FailFast for no wait.
func Wait(d time.Duration) Policy {
	if d <= 0 {
		panic(fmt.Sprintf("routelock: lock.Wait(%v): must be positive; use FailFast for no wait", d))
	}
	return Policy{Wait: d}
}

// FailFast makes one attempt at the lock: a request that finds it held by
// another owner is refused at once with 409 Conflict and Retry-After
// (codes.Aborted with a RetryInfo detail for gRPC). It is
// Policy{Wait: lockcore.FailFast}.
func FailFast() Policy { return Policy{Wait: lockcore.FailFast} }

// TTL sets the lease length: how long the lock outlives a process that
// crashed while holding it. While the handler runs the engine renews the
// lease about every d/3, so a long handler keeps its lock. Default: the
// engine's, 10 seconds for the Redis engine, which bounds every lease by
// its Options.MaxTTL (30 s unless set; lock.NewRedis sets it): a longer
// TTL is refused where the route is built, or, where the engine alone
// sees it (lock.ByParam before SetDefault, gRPC rules), with
// lockcore.ErrMisconfigured (500, codes.Internal). Combine it with a wait:
//
//	locker.ByParam("productID", lock.Wait(time.Second), lock.TTL(30*time.Second))
//
// Panics if d is below 30ms.
func TTL(d time.Duration) Policy {
	p := Policy{TTL: d}
	if err := p.Validate(); err != nil || d == 0 {
		panic(fmt.Sprintf("routelock: lock.TTL(%v): below the minimum 30ms", d))
	}
	return p
}

// MaxHold sets a ceiling on how long one hold of the lock may last,
// however long the handler runs and the engine renews it: once the request
// has held the lock for d, its context is cancelled with a cause matching
// lockcore.ErrMaxHold (and lockcore.ErrLockLost) and the lock is released
// for the next request, which gets a greater fencing token. A handler
// still running must not write what the lock protects: it checks its
// context before each write and gives the store its fencing token, which
// the store then refuses as older than the next holder's.
//
//	r.With(locker.ByParam("productID", lock.MaxHold(30*time.Second))).Post("/products/{productID}/restock", restock)
//
// Panics if d is not positive.
func MaxHold(d time.Duration) Policy {
	if d <= 0 {
		panic(fmt.Sprintf("routelock: lock.MaxHold(%v): must be positive", d))
	}
	return Policy{MaxHold: d}
}

// Shared makes the route's or method's requests readers of the lock: any
// number of them hold it at once, while a request of a route without
// Shared (a writer, the default) holds it alone. Waiting is first come,
// first served: a reader that arrives while a writer waits queues behind
// it, so that a stream of readers never starves a writer.
//
//	r.With(locker.ByParam("productID", lock.Shared())).Get("/products/{productID}", show)
//	r.With(locker.ByParam("productID")).Put("/products/{productID}", update) // a writer
//
// Every hold, a reader's included, gets a fencing token above all earlier
// ones of the resource. A writer's request may re-enter the lock as a
// reader (a nested call); a reader's request that asks for it as a writer
// fails at once with lockcore.ErrUpgrade (409 Conflict without
// Retry-After, codes.FailedPrecondition), where waiting would never end.
// It is Policy{Share: lifecycle.ShareAll}.
func Shared() Policy { return Policy{Share: lifecycle.ShareAll} }

// Permits lets up to n requests hold the lock at once, a semaphore: each
// gets a slot 0..n-1 that no other holder has meanwhile (see Slot), and a
// request of a route without Permits or Shared excludes them all. Waiting
// is first come, first served; a crashed holder's permit comes back when
// its lease (TTL) ends, and the engine renews permits as it does locks.
//
//	r.With(locker.ByParam("productID", lock.Permits(4))).Post("/products/{productID}/buy", buy)
//
// Routes that name one resource with different n each count against
// their own: a request enters while fewer than its route's n hold the
// lock, so a rolling deployment that changes n needs no coordination, and
// during it the larger n is the bound. Permits(n) is
// Policy{Share: n}. Panics if n is not positive.
func Permits(n int) Policy {
	if n <= 0 {
		panic(fmt.Sprintf("routelock: lock.Permits(%d): must be positive", n))
	}
	return Policy{Share: n}
}

// Segments splits the route's resource into n segments, each an exclusive
// lock of its own, so that n requests for it run at once, each in its own
// segment: a product's stock kept as n parts, each sold under its own
// lock. On a Redis Cluster each segment has a hash tag of its own, so the
// segments spread over the slots and masters. A segment is a lock of its
// own: a route or method that locks the resource without Segments (a
// restock) excludes no segment's holder, nor they it; give every route
// and method that writes the segmented data the same Segments. The
// middleware (or gRPC interceptor) picks a segment whose gate is open, in
// turn from one request to the next (with FailFast, each open one until
// one is free); the handler, which runs once, learns which with Slot,
// and calls NextSegment to move to another when its segment is exhausted:
//
//	r.With(lock.ByParam("productID", lock.Segments(8))).Post("/products/{productID}/buy", buy)
//
// For HTTP routes and gRPC methods alike; not with several resources
// (keyfunc.Func.Also), which panics. Segments(n) is Policy{Segments: n}.
// Panics if n is not between 1 and 256.
func Segments(n int) Policy {
	if n <= 0 || n > lifecycle.MaxSegments {
		panic(fmt.Sprintf("routelock: lock.Segments(%d): want 1 to %d", n, lifecycle.MaxSegments))
	}
	return Policy{Segments: n}
}

// Restock lets the route through its resource's closed gate (SoldOut),
// as a route that restocks a sold-out product must get through; its
// handler reopens the gate with InStock once the stock is back, and then
// every instance sells again:
//
//	r.With(locker.ByParam("productID", lock.Restock())).Post("/products/{productID}/restock", restock)
//
// It holds the lock as the route would without it (exclusive, unless
// given Shared or Permits too), so that no buyer of the resource runs
// meanwhile; of a segmented product (Segments) it holds the product's own
// key, which excludes no buyer: buyers of segments whose gates are open
// run on beside it, as for any route on the product's key. Readers
// (Shared) pass a closed gate without it. Not with Segments: a restock
// locks the resource itself (a segmented route's product key); a route
// given both panics. It is Policy{Restock: true}.
func Restock() Policy { return Policy{Restock: true} }

// policy returns ps as one Policy: each field is the last non-zero one
// given.
func policy(ps []Policy) Policy {
	var p Policy
	for _, q := range ps {
		p = q.Or(p)
	}
	return p
}

// Defaults sets the Policy of the Locker's routes (By, ByParam) and of the
// gRPC methods locked through it: each field a route
// or method leaves zero is taken from ps, the last non-zero one given.
//
//	locker := lock.New(rdb, lock.Defaults(lock.FailFast(), lock.TTL(30*time.Second)))
//
// Panics if the Policy is invalid (Policy.Validate), or shares
// the lock (Shared, Permits), splits it (Segments) or passes closed gates
// (Restock): that is a route's or method's own, and a Locker-wide default
// would leave no way to write, or no gate.
func Defaults(ps ...Policy) Option {
	p := policy(ps)
	if err := p.Validate(); err != nil {
		panic("routelock: lock.Defaults: " + strings.TrimPrefix(err.Error(), "routelock: "))
	}
	if p.Share != 0 || p.Segments != 0 || p.Restock {
		panic("routelock: lock.Defaults: Shared, Permits, Segments and Restock are given to routes and methods, not as defaults")
	}
	return Option{func(l *Locker) { l.defaults = p.Or(l.defaults) }}
}

// Logger makes the Locker report through l, once each and with structured
// fields: configuration errors (a route whose pattern does not name its
// key, answered 500, see keyfunc.Param; Redis saying it is set up wrongly,
// lockcore.ErrMisconfigured); Redis becoming unreachable and answering again (once
// per transition, not per request); a lease lost while its handler ran,
// and why; a release that failed and is retried in the background. Lines
// name routes and resources (productID), never a request's values or a
// token. Default: silent. gRPC servers report their configuration errors
// through interceptor.Config.Logger.
//
//	locker := lock.New(rdb, lock.Logger(slog.Default()))
func Logger(l *slog.Logger) Option {
	return Option{func(k *Locker) { k.logger = l }}
}

// Trace makes the Locker label each acquisition with the trace id that f
// returns for the request's context (Policy.Trace; "" for none),
// which the engine shows to operators beside the route and the instance
// name of each holder and waiter (package admin, the routelock command),
// so that a stuck hold can be followed to its request. For the
// OpenTelemetry span of the request's context:
//
//	locker := lock.New(rdb, lock.Trace(func(ctx context.Context) string {
//		if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
//			return sc.TraceID().String()
//		}
//		return ""
//	}))
//
// f runs once per acquisition, on the request's goroutine, and must be
// cheap. Default: none. Panics if f is nil.
func Trace(f func(context.Context) string) Option {
	if f == nil {
		panic("routelock: lock.Trace(nil)")
	}
	return Option{func(l *Locker) { l.trace = f }}
}

// Observe makes o watch the Locker's locks: OpenTelemetry spans and metrics
// with package lockotel,
//
//	locker := lock.New(rdb, lock.Observe(lockotel.New(lockotel.Config{})))
//
// The Locker calls o.Observe around each acquisition and tells
// o.Events() of each hold's end (Events.Ended); for New, the Redis engine
// is told o.Events() too (redisengine.Options.Events: waits, renewals,
// wake-ups); for FromEngine, give o.Events() to the engine's own events
// option for those. Given more than once, the observers are called in the
// order given (the last outermost) and each is told the events; one given
// again is counted once.
//
// Panics if o is nil.
func Observe(o Observer) Option {
	if o == nil {
		panic("routelock: lock.Observe(nil)")
	}
	return Option{func(l *Locker) {
		if !slices.ContainsFunc(l.observers, func(p Observer) bool { return sameObserver(p, o) }) {
			l.observers = append(l.observers, o)
		}
		l.redis.Events = joinEvents(l.redis.Events, o.Events())
	}}
}

// events tells each of its Events in turn.
type events []lockcore.Events

func (es events) Waiting(key lockcore.Key, delta int) {
	for _, e := range es {
		e.Waiting(key, delta)
	}
}

func (es events) Woken(key lockcore.Key, by string) {
	for _, e := range es {
		e.Woken(key, by)
	}
}

func (es events) Renewed(key lockcore.Key, err error) {
	for _, e := range es {
		e.Renewed(key, err)
	}
}

func (es events) Ended(ctx context.Context, key lockcore.Key, held, release time.Duration, cause, err error) {
	for _, e := range es {
		e.Ended(ctx, key, held, release, cause, err)
	}
}

// joinEvents returns the Events that tells a and then b, either of which
// may be nil; b is left out when a tells it already.
func joinEvents(a, b lockcore.Events) lockcore.Events {
	if b == nil {
		return a
	}
	if a == nil {
		return b
	}
	all, ok := a.(events)
	if !ok {
		all = events{a}
	}
	for _, e := range all {
		if same(e, b) {
			return a
		}
	}
	return append(all[:len(all):len(all)], b)
}

// sameObserver reports whether a and b are one value; values that cannot
// be compared are not.
func sameObserver(a, b Observer) (eq bool) {
	defer func() { _ = recover() }()
	return a == b
}

// same reports whether a and b are one value; values that cannot be
// compared are not.
func same(a, b lockcore.Events) (eq bool) {
	defer func() { _ = recover() }()
	return a == b
}
