package interceptor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/routelock/lock/internal/keyview"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// view is what the interceptors ask of a key function that its API does
// not answer (see package keyview).
var view = keyview.Of[keyfunc.Func]()

// tokenKey is the metadata key that carries propagated owner tokens from
// one service to the next, in one value as the HTTP header Routelock-Token
// does (its name in gRPC's lower case), so tokens cross between HTTP and
// gRPC unchanged.
const tokenKey = "routelock-token"

// Rule says which methods lock what, and how.
type Rule struct {
	// Method is the full method name, "/shop.Inventory/Reserve"; or
	// "/shop.Inventory/*" for every method of a service; or "*" for every
	// method. A call matches its exact rule first, then its service's, then
	// "*". Required.
	Method string

	// Key names the resource a call locks. Required. When a wildcard rule's
	// key does not apply to a method (Field of a field its request message
	// does not have, keyfunc.ErrSkip) the call passes through unlocked; for
	// a rule that names the method exactly it is a configuration error and
	// the call fails with codes.Internal (Check reports it at startup).
	Key keyfunc.Func

	// Policy is how the lock is acquired: how long a call waits for a lock
	// held by another owner (never past the call's deadline;
	// lockcore.FailFast: one attempt, then codes.Aborted) and the lease's
	// TTL. It reaches the engine as it is, with Route set to the method.
	// Default: the zero Policy, the engine's defaults: a wait of 5 seconds
	// and the engine's TTL, or a Locker's Defaults (lock.Defaults) when the
	// engine is a Locker.
	Policy lifecycle.Policy

	// OnError returns the error a refused call ends with: bad key, lock
	// held by another owner, Redis unavailable. err matches the sentinels
	// of keyfunc and lockcore. Default: Config.OnError.
	OnError func(ctx context.Context, fullMethod string, err error) error
}

// Method returns the Rule of the gRPC method fullMethod, such as
// "/shop.Inventory/Reserve" ("/shop.Inventory/*" for every method of the
// service, "*" for every method): its calls lock the resource key names,
// acquired with the Policy of ps (each field the last non-zero one given;
// package lock's Wait, FailFast and TTL make them).
//
//	interceptor.Method("/shop.Inventory/Reserve", interceptor.Field("product_id").As("productID"), lock.Wait(time.Second))
//
// Renaming the key As("productID") makes the method share the lock of HTTP
// routes on {productID}: the key is productID:42 on both, and the owner
// token carried between them re-enters it.
//
// Panics if fullMethod is malformed, key is zero or cannot read gRPC calls
// (keyfunc.Param and other HTTP-only functions), or the Policy is invalid.
func Method(fullMethod string, key keyfunc.Func, ps ...lifecycle.Policy) Rule {
	var p lifecycle.Policy
	for _, q := range ps {
		p = q.Or(p)
	}
	r := Rule{Method: fullMethod, Key: key, Policy: p}
	if err := r.validate(); err != nil {
		panic(err.Error())
	}
	if err := p.Validate(); err != nil {
		// Here, where the rule is written; the server interceptors check
		// it again over their Locker's defaults (lifecycle.Prepare).
		panic(fmt.Sprintf("%v (interceptor rule for %s)", err, fullMethod))
	}
	return r
}

// Config configures the server interceptors.
type Config struct {
	// Rules are the methods that lock. Calls of other methods pass through
	// unlocked (still carrying a propagated owner token on).
	Rules []Rule

	// TrustToken reports whether a call may carry a propagated owner token
	// in routelock-token metadata; the token of any other call is ignored and the
	// call gets a fresh one. A token lets its bearer re-enter the locks of
	// the call that minted it, so restrict it to callers you trust when the
	// service is reachable from outside. Default: every call may.
	TrustToken func(ctx context.Context, fullMethod string) bool

	// Logger, if set, is told once per rule when a rule that names its
	// method exactly has a key the method's message lacks
	// (keyfunc.ErrSkip): a configuration error, answered codes.Internal.
	// The line names the method and the key function, never a call's
	// values. Default: nil, silent.
	Logger *slog.Logger

	// OnError returns the error a refused call ends with, for rules whose
	// own OnError is nil. Default: Status.
	OnError func(ctx context.Context, fullMethod string, err error) error
}

// validate reports what is wrong with c, as UnaryServer and StreamServer
// panic with it.
func (c Config) validate() error {
	seen := make(map[string]bool, len(c.Rules))
	for _, r := range c.Rules {
		if err := r.validate(); err != nil {
			return err
		}
		if seen[r.Method] {
			return fmt.Errorf("routelock: interceptor.Config: two rules for %s", r.Method)
		}
		seen[r.Method] = true
	}
	return nil
}

func (r Rule) validate() error {
	m := r.Method
	switch {
	case m == "*":
	case !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 || strings.HasSuffix(m, "/") ||
		strings.HasPrefix(m, "//") || strings.Contains(m, "*") && !strings.HasSuffix(m, "/*"):
		return fmt.Errorf("routelock: interceptor rule for method %q: want /package.Service/Method, /package.Service/* or *", m)
	}
	switch {
	case !view.ForRPC(r.Key):
		// The zero Func, which has no sources, reads nothing.
		return fmt.Errorf("routelock: interceptor rule for %s: Key %v is required and must read gRPC calls", m, r.Key)
	}
	if r.Policy.Segments > 0 && len(view.Resources(r.Key)) > 1 {
		return fmt.Errorf("%w: interceptor rule for %s: Segments %d with several resources (%v): only one resource can be segmented", lockcore.ErrMisconfigured, m, r.Policy.Segments, r.Key)
	}
	return nil
}

// rule is a validated Rule.
type rule struct {
	method  string
	key     keyfunc.Func   // the first resource's
	also    []keyfunc.Func // the others', for a key made with keyfunc.Func.Also
	policy  lifecycle.Policy
	onError func(context.Context, string, error) error
	exact   bool
	stream  bool      // key read from the first message of a stream
	once    sync.Once // its configuration error, logged once
}

// server is one configured set of rules.
type server struct {
	l       lifecycle.Locker
	exact   map[string]*rule
	service map[string]*rule // by "/pkg.Service/"
	all     *rule
	trust   func(context.Context, string) bool
	logger  *slog.Logger
}

func newServer(l lifecycle.Locker, c Config) *server {
	if l == nil {
		panic("routelock: nil Engine given to the interceptor")
	}
	if err := c.validate(); err != nil {
		panic(err.Error())
	}
	s := &server{l: l, exact: map[string]*rule{}, service: map[string]*rule{}, trust: c.TrustToken, logger: c.Logger}
	for _, r := range c.Rules {
		// Over the Locker's defaults, and checked, once: the calls'
		// acquisitions do neither again.
		p, err := lifecycle.Prepare(l, r.Policy)
		if err != nil {
			panic(fmt.Sprintf("%v (interceptor rule for %s)", err, r.Method))
		}
		ru := &rule{method: r.Method, key: r.Key, policy: p, onError: r.OnError, stream: view.ReadsMessage(r.Key)}
		if rs := view.Resources(r.Key); len(rs) > 1 {
			ru.key, ru.also = rs[0], rs[1:]
		}
		if ru.onError == nil {
			ru.onError = c.OnError
		}
		if ru.onError == nil {
			ru.onError = func(_ context.Context, _ string, err error) error { return Status(err) }
		}
		switch {
		case r.Method == "*":
			s.all = ru
		case strings.HasSuffix(r.Method, "/*"):
			s.service[strings.TrimSuffix(r.Method, "*")] = ru
		default:
			ru.exact = true
			s.exact[r.Method] = ru
		}
	}
	return s
}

// match returns the rule of fullMethod, or nil.
func (s *server) match(fullMethod string) *rule {
	if r := s.exact[fullMethod]; r != nil {
		return r
	}
	if len(s.service) > 0 {
		if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
			if r := s.service[fullMethod[:i+1]]; r != nil {
				return r
			}
		}
	}
	return s.all
}

// withToken returns ctx with the propagated owner tokens of the call, if it
// may carry them (lifecycle.Intake), and the tokens removed from the
// incoming metadata that the handler sees.
func (s *server) withToken(ctx context.Context, fullMethod string) (context.Context, error) {
	vs := metadata.ValueFromIncomingContext(ctx, tokenKey) // copies only these values
	if len(vs) == 0 {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	md.Delete(tokenKey) // md is a copy
	stripped := metadata.NewIncomingContext(ctx, md)
	var trust func() bool
	if s.trust != nil {
		trust = func() bool { return s.trust(ctx, fullMethod) }
	}
	return lifecycle.Intake(stripped, tokenKey, vs, trust)
}

// UnaryServer returns a unary server interceptor that holds the lock of
// the rule matching each call while its handler runs:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.UnaryServer(l, interceptor.Config{Rules: ...})))
//
// A call whose key is missing or invalid fails with codes.InvalidArgument,
// one that finds the lock held with codes.Aborted (after its wait), one
// that cannot reach Redis with codes.Unavailable; in each case the handler
// does not run and nothing is held. The handler's context carries the
// lease: it is cancelled with cause lockcore.ErrLockLost if the lease is
// lost, and holds the owner token and fencing token. The lock is released
// when the handler returns or panics; a panic goes on up the chain.
//
// Panics if c is invalid: a malformed method name, a zero key or one that
// cannot read gRPC calls, an invalid Policy, two rules for one method.
func UnaryServer(l lifecycle.Locker, c Config) grpc.UnaryServerInterceptor {
	s := newServer(l, c)
	return s.unary
}

func (s *server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	r := s.match(info.FullMethod)
	tctx, err := s.withToken(ctx, info.FullMethod)
	if r == nil {
		return handler(tctx, req)
	}
	var (
		lease *lifecycle.Lease
		rest  []*lifecycle.Lease
	)
	if err == nil {
		lease, rest, err = s.lock(tctx, r, info.FullMethod, req)
	}
	switch {
	case err != nil:
		return nil, r.onError(ctx, info.FullMethod, err)
	case lease == nil:
		return handler(tctx, req)
	}
	// Deferred, so that a panicking handler releases too. A failed release
	// has no one to tell: the key expires with its TTL.
	defer release(tctx, lease, rest)
	return handler(lease.Context(), req)
}

// release releases ls, then rest, as lock returned them: together
// (lifecycle.ReleaseAll), so that their engine may give them up in one
// exchange with its backend.
func release(ctx context.Context, ls *lifecycle.Lease, rest []*lifecycle.Lease) {
	if rest == nil {
		_ = ls.Release(ctx)
		return
	}
	_ = lifecycle.ReleaseAll(ctx, append(rest[:len(rest):len(rest)], ls))
}

// lock takes the lock of rule r for a call of method fullMethod with
// context ctx and request req; the Policy's Route is the method. It
// returns no lease and no error when r is a wildcard rule whose key does
// not apply to the call (keyfunc.ErrSkip): the call passes through. For
// a key that names several resources (keyfunc.Func.Also) it takes them
// all or none (lifecycle.AcquireAll): the lease returned is the last one
// taken, whose context holds them all, and rest the others.
func (s *server) lock(ctx context.Context, r *rule, fullMethod string, req any) (ls *lifecycle.Lease, rest []*lifecycle.Lease, err error) {
	if r.also != nil {
		return s.lockAll(ctx, r, fullMethod, req)
	}
	parts, err := r.key.RPC(ctx, req)
	if err != nil {
		if errors.Is(err, keyfunc.ErrSkip) {
			if !r.exact {
				return nil, nil, nil
			}
			if s.logger != nil {
				r.once.Do(func() {
					s.logger.Error("routelock: the rule's key does not apply to its method: every call is refused with Internal",
						"method", r.method, "key", r.key.String(), "err", err)
				})
			}
		}
		return nil, nil, err
	}
	key, err := lockcore.NewKey(parts...)
	if err != nil {
		return nil, nil, err
	}
	p := r.policy
	p.Route = fullMethod
	if p.Segments > 0 {
		// One open segment of the resource; the handler moves on from an
		// exhausted one with lock.NextSegment.
		ls, err = lifecycle.AcquireSegment(ctx, s.l, key, p)
		return ls, nil, err
	}
	ls, err = s.l.Acquire(ctx, key, p)
	return ls, nil, err
}

// lockAll is lock for a key that names several resources. A resource
// whose key does not apply to the call fails it (ErrSkip), whatever the
// rule.
func (s *server) lockAll(ctx context.Context, r *rule, fullMethod string, req any) (*lifecycle.Lease, []*lifecycle.Lease, error) {
	keys := make([]lockcore.Key, 0, 1+len(r.also))
	for _, f := range append([]keyfunc.Func{r.key}, r.also...) {
		parts, err := f.RPC(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		key, err := lockcore.NewKey(parts...)
		if err != nil {
			return nil, nil, err
		}
		keys = append(keys, key)
	}
	p := r.policy
	p.Route = fullMethod
	leases, err := lifecycle.AcquireAll(ctx, s.l, keys, p)
	if err != nil {
		return nil, nil, err
	}
	n := len(leases) - 1
	return leases[n], leases[:n], nil
}
