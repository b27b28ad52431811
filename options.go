package lock

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/routelock/lock/lockcore"
)

// Option configures a Locker, when given to New, one route, when given to
// By or ByParam, or one gRPC method, when given to Method. A Locker's
// options are the defaults of its routes and methods; theirs override them.
// An option given where it means nothing (Prefix to a route, Name to New,
// OnError to a gRPC method) panics.
type Option struct {
	name  string
	scope scope
	apply func(*config)
}

// scope is where an option may be given: a set of places.
type scope uint8

const (
	inNew scope = 1 << iota
	inRoute
	inMethod

	anywhere = inNew | inRoute | inMethod
)

func (s scope) String() string {
	var where []string
	if s&inNew != 0 {
		where = append(where, "New")
	}
	if s&inRoute != 0 {
		where = append(where, "a route (By, ByParam)")
	}
	if s&inMethod != 0 {
		where = append(where, "a gRPC method (Method)")
	}
	return strings.Join(where, " or ")
}

// config is what options set.
type config struct {
	core    lockcore.Options
	wait    time.Duration // 0: middleware.DefaultWait; < 0: fail fast
	ttl     time.Duration // 0: core.TTL
	name    string
	trust   func(*http.Request) bool
	onError func(http.ResponseWriter, *http.Request, error)

	rpcTrust   func(ctx context.Context, fullMethod string) bool
	rpcOnError func(ctx context.Context, fullMethod string, err error) error
}

func (c *config) applyAll(s scope, opts []Option) {
	for _, o := range opts {
		if o.apply == nil {
			panic("lock: zero Option")
		}
		if o.scope&s == 0 {
			panic(fmt.Sprintf("lock: option %s applies only to %v", o.name, o.scope))
		}
		o.apply(c)
	}
}

// Wait makes a request wait up to d for a lock held by another owner, and
// never past the request's own deadline; then it is refused with 409
// Conflict (codes.Aborted for gRPC). The default is blocking with a wait of 5 seconds
// (middleware.DefaultWait).
//
// Panics if d is not positive; use FailFast for no wait.
func Wait(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("lock: Wait(%v): must be positive; use FailFast for no wait", d))
	}
	return Option{"Wait", anywhere, func(c *config) { c.wait = d }}
}

// FailFast makes one attempt at the lock: a request that finds it held by
// another owner is refused at once with 409 Conflict and Retry-After
// (codes.Aborted with a RetryInfo detail for gRPC).
func FailFast() Option {
	return Option{"FailFast", anywhere, func(c *config) { c.wait = -1 }}
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
	return Option{"TTL", anywhere, func(c *config) {
		c.ttl = d
		c.core.TTL = d
	}}
}

// Name names the resource a route locks in place of the names of its key
// functions: ByParam("productID", Name("product")) locks product:42. Routes
// (and gRPC methods) with the same name and values share a lock; give
// routes different names to give them separate locks.
//
// Panics if name is empty or longer than 256 bytes.
func Name(name string) Option {
	if name == "" || len(name) > lockcore.MaxKeyPartLen {
		panic(fmt.Sprintf("lock: Name(%q): must be 1 to %d bytes", name, lockcore.MaxKeyPartLen))
	}
	return Option{"Name", inRoute | inMethod, func(c *config) { c.name = name }}
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
	return Option{"TrustToken", inNew | inRoute, func(c *config) { c.trust = trust }}
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
	return Option{"OnError", inNew | inRoute, func(c *config) { c.onError = fn }}
}

// TrustRPCToken decides which gRPC calls may carry a propagated owner token
// (the routelock-token metadata that UnaryClientInterceptor writes), as
// TrustToken does for HTTP requests. It applies to all methods of the
// Locker's server interceptors. The default trusts every call.
//
// Panics if trust is nil.
func TrustRPCToken(trust func(ctx context.Context, fullMethod string) bool) Option {
	if trust == nil {
		panic("lock: TrustRPCToken(nil)")
	}
	return Option{"TrustRPCToken", inNew, func(c *config) { c.rpcTrust = trust }}
}

// OnRPCError replaces the error a refused gRPC call ends with, as OnError
// does for HTTP. The default is interceptor.Status; interceptor.Code maps
// err to the default code.
//
// Panics if fn is nil.
func OnRPCError(fn func(ctx context.Context, fullMethod string, err error) error) Option {
	if fn == nil {
		panic("lock: OnRPCError(nil)")
	}
	return Option{"OnRPCError", inNew | inMethod, func(c *config) { c.rpcOnError = fn }}
}

// Prefix starts every Redis key and channel of the Locker. Default:
// "routelock:". Lockers that share a prefix and a Redis share their locks.
//
// New panics if p contains '{', '}' or a space.
func Prefix(p string) Option {
	return Option{"Prefix", inNew, func(c *config) { c.core.Prefix = p }}
}

// Engine sets all of the engine's options at once (see lockcore.Options);
// options given after it override its fields.
func Engine(o lockcore.Options) Option {
	return Option{"Engine", inNew, func(c *config) { c.core = o }}
}
