package lock

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/routelock/lock/internal/config"
	"github.com/routelock/lock/internal/keylimit"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// Option configures a Locker, when given to New or FromEngine, one route,
// when given to By or ByParam, or one gRPC method, when given to
// grpclock.Method. A Locker's options are the defaults of its routes and
// methods; theirs override them. An option given where it means nothing
// (Prefix to a route or to FromEngine, Name to New) panics. Package
// grpclock adds the options of gRPC (grpclock.TrustRPCToken,
// grpclock.OnRPCError).
type Option = config.Option

// Wait makes a request wait up to d for a lock held by another owner, and
// never past the request's own deadline; then it is refused with 409
// Conflict (codes.Aborted for gRPC). The default is blocking with a wait of 5 seconds
// (lockcore.DefaultWait).
//
// Panics if d is not positive; use FailFast for no wait.
func Wait(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("lock: Wait(%v): must be positive; use FailFast for no wait", d))
	}
	return config.New("Wait", config.Anywhere, func(c *config.Config) { c.Wait = d })
}

// FailFast makes one attempt at the lock: a request that finds it held by
// another owner is refused at once with 409 Conflict and Retry-After
// (codes.Aborted with a RetryInfo detail for gRPC).
func FailFast() Option {
	return config.New("FailFast", config.Anywhere, func(c *config.Config) { c.Wait = -1 })
}

// TTL sets the lease length: how long the lock outlives a process that
// crashed while holding it. While the handler runs the watchdog renews the
// lease about every d/3, so a long handler keeps its lock. Default: 10s.
//
// Panics if d is below lockcore.MinTTL (30ms).
func TTL(d time.Duration) Option {
	if d < lockcore.MinTTL {
		panic(fmt.Sprintf("lock: TTL(%v): below the minimum %v", d, lockcore.MinTTL))
	}
	return config.New("TTL", config.Anywhere, func(c *config.Config) {
		c.TTL = d
		c.Redis.TTL = d
	})
}

// Name names the resource a route locks in place of the names of its key
// functions: ByParam("productID", Name("product")) locks product:42. Routes
// (and gRPC methods) with the same name and values share a lock; give
// routes different names to give them separate locks.
//
// Panics if name is empty or longer than 256 bytes.
func Name(name string) Option {
	if name == "" || len(name) > keylimit.PartLen {
		panic(fmt.Sprintf("lock: Name(%q): must be 1 to %d bytes", name, keylimit.PartLen))
	}
	return config.New("Name", config.InRoute|config.InMethod, func(c *config.Config) { c.Name = name })
}

// Methods makes a lock apply to requests of the given HTTP methods only;
// requests of other methods pass through unlocked. On a router-wide lock it
// keeps reads from queueing behind writes:
//
//	r.Use(lock.ByParam("productID", lock.Methods("POST", "PUT", "PATCH", "DELETE")))
//
// Default: every method. Panics if none is given.
func Methods(methods ...string) Option {
	if len(methods) == 0 {
		panic("lock: Methods(): name at least one HTTP method")
	}
	ms := slices.Clone(methods)
	return config.New("Methods", config.InNew|config.InRoute, func(c *config.Config) { c.Methods = ms })
}

// TrustToken decides which requests may carry propagated owner tokens (the
// Routelock-Token header that Transport writes). The header of a request
// for which trust returns false is ignored: the request re-enters nothing.
// The default trusts every request, which is safe against made-up tokens (a
// token only re-enters the live hold it was minted for); a service
// reachable from outside should still trust only its own callers, so that
// a token that leaked cannot be used there.
//
// Panics if trust is nil.
func TrustToken(trust func(*http.Request) bool) Option {
	if trust == nil {
		panic("lock: TrustToken(nil)")
	}
	return config.New("TrustToken", config.InNew|config.InRoute, func(c *config.Config) { c.Trust = trust })
}

// OnError replaces the response to a request that is refused: bad key
// (err matches ErrInvalidKey or a keyfunc error), lock held by another owner
// (ErrNotAcquired), Redis unreachable (ErrUnavailable). The default is
// middleware.Error; middleware.Status maps err to the default status.
//
// Panics if fn is nil.
func OnError(fn func(w http.ResponseWriter, r *http.Request, err error)) Option {
	if fn == nil {
		panic("lock: OnError(nil)")
	}
	return config.New("OnError", config.InNew|config.InRoute, func(c *config.Config) { c.OnError = fn })
}

// Prefix starts every Redis key and channel of the Locker that New makes.
// Default: "routelock:". Lockers that share a prefix and a Redis share their
// locks.
//
// New panics if p contains '{', '}' or a space.
func Prefix(p string) Option {
	return config.New("Prefix", config.InRedis, func(c *config.Config) { c.Redis.Prefix = p })
}

// RedisOptions sets all of the options of the Redis engine that New makes
// at once (see redisengine.Options); options given after it override its
// fields.
func RedisOptions(o redisengine.Options) Option {
	return config.New("RedisOptions", config.InRedis, func(c *config.Config) { c.Redis = o })
}

// Logger makes the Locker report through l, once each and with structured
// fields: configuration errors (a route whose pattern does not name its
// key, answered 500, see keyfunc.Param; an exact gRPC rule whose
// key its method's message lacks, answered Internal; Redis saying it is
// set up wrongly, ErrMisconfigured); Redis becoming unreachable and
// answering again (once per transition, not per request); a lease lost
// while its handler ran, and why; a release that failed and is retried in
// the background. Lines name routes, methods and resources (productID),
// never a request's values or a token. Default: silent.
//
//	locker := lock.New(rdb, lock.Logger(slog.Default()))
func Logger(l *slog.Logger) Option {
	return config.New("Logger", config.InNew, func(c *config.Config) {
		c.Logger = l
		c.Redis.Logger = l
	})
}

// Observe makes o watch the Locker's locks: OpenTelemetry spans and metrics
// with package lockotel,
//
//	locker := lock.New(rdb, lock.Observe(lockotel.New(lockotel.Config{})))
//
// The Locker locks through o.Wrap of its engine, and for New, the Redis
// engine is told o.Events() (redisengine.Options.Events); give Observe
// after RedisOptions, which replaces all of the engine's options. For
// FromEngine it wraps the engine; give o.Events() to the engine's own
// events option too. Given more than once, the observers wrap the engine
// in the order given (the last outermost) and each is told the events; one
// given again is counted once.
//
// Panics if o is nil.
func Observe(o lockcore.Observer) Option {
	if o == nil {
		panic("lock: Observe(nil)")
	}
	return config.New("Observe", config.InNew, func(c *config.Config) {
		if inner := c.Wrap; inner != nil {
			c.Wrap = func(e lockcore.Engine) lockcore.Engine { return o.Wrap(inner(e)) }
		} else {
			c.Wrap = o.Wrap
		}
		c.Redis.Events = joinEvents(c.Redis.Events, o.Events())
	})
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

// same reports whether a and b are one value; values that cannot be
// compared are not.
func same(a, b lockcore.Events) (eq bool) {
	defer func() { _ = recover() }()
	return a == b
}
