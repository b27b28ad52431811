package middleware

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/routelock/lock/internal/chiroute"
	"github.com/routelock/lock/internal/keyview"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// view is what the middleware asks of a key function that its API does
// not answer (see package keyview).
var view = keyview.Of[keyfunc.Func]()

// tokenHeader carries propagated owner tokens from one service to the next:
// one field line, 1 to 16 tokens separated by commas (lifecycle.Intake).
const tokenHeader = "Routelock-Token"

// Config configures Lock.
type Config struct {
	// Key names the resource a request locks. Required.
	Key keyfunc.Func

	// Policy is how the lock is acquired: how long a request waits for a
	// lock held by another owner (never past the request context's
	// deadline; lockcore.FailFast: one attempt, then 409) and the lease's
	// TTL. It reaches the engine as it is, with Route set for an engine
	// that records routes. Default: the zero Policy, the engine's
	// defaults: a wait of 5 seconds and the engine's TTL, or a Locker's
	// Defaults (lock.Defaults) when the engine is a Locker.
	Policy lifecycle.Policy

	// TrustToken reports whether a request may carry a propagated owner
	// token in the Routelock-Token header; the header of any other request is ignored, and
	// the request gets a fresh token. A token lets its bearer re-enter the
	// locks of the request that minted it, so restrict it to callers you
	// trust when the service is reachable from outside (e.g. by a shared
	// secret header or the peer's network). Default: every request may.
	TrustToken func(*http.Request) bool

	// Methods, if set, are the HTTP methods whose requests lock; requests
	// of other methods pass through unlocked, as on a route without the
	// key. A router-wide lock with Methods: []string{"POST", "PUT",
	// "PATCH", "DELETE"} lets reads (GET /products/42) run beside a
	// purchase instead of queueing behind it. Default: nil, every method.
	Methods []string

	// Logger, if set, is told once per middleware when the route it wraps
	// does not name its key (an error of the key function matching
	// lockcore.ErrMisconfigured): a configuration error, answered 500. The line names the route's
	// pattern and the key function, never a request's values. Default:
	// nil, silent.
	Logger *slog.Logger

	// OnError answers a request that is not let through: bad key (400),
	// lock held by another owner (409), Redis unavailable (503). err
	// matches the sentinels of lockcore (and keyfunc.ErrMissing,
	// keyfunc.ErrTooLarge); an error of the key function has a method
	// Public() string, what the client may be told. Default: Error.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
}

// Lock returns middleware that holds the lock on c.Key's resource, taken
// from engine l, while the next handler runs, as the package documentation
// describes.
//
// When l's acquisitions are labelled with their route (a lock.Locker
// with observers, such as package lockotel's, whose spans and metrics
// carry it; or on an engine that is a lockcore.Operator, which shows the
// route to operators beside each holder and waiter), Lock sets
// Policy.Route to the template of each request's route (chi's pattern,
// such as /products/{productID}/buy, or http.ServeMux's
// Request.Pattern). Otherwise Route stays empty: finding chi's pattern
// costs a request an allocation.
//
// Panics if c.Key is zero or cannot read HTTP requests, or c.Policy is
// invalid (lock.Policy.Validate).
func Lock(l lifecycle.Locker, c Config) func(http.Handler) http.Handler {
	m := newLocker(l, c)
	return func(next http.Handler) http.Handler { return &handler{m: m, next: next} }
}

// handler is the lock middleware of m around next.
type handler struct {
	m    *locker
	next http.Handler
	once logOnce
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.m.serve(w, r, h.next, &h.once)
}

// LockKey returns the key function the middleware locks on and the HTTP
// methods it locks (nil: every one), for Check.
func (h *handler) LockKey() (keyfunc.Func, []string) { return h.m.full, h.m.methods }

// locker is one configured middleware.
type locker struct {
	l       lifecycle.Locker
	full    keyfunc.Func   // Config.Key
	key     keyfunc.Func   // the first resource's
	also    []keyfunc.Func // the others', for a key made with keyfunc.Func.Also
	policy  lifecycle.Policy
	route   bool // set policy.Route per request: the engine records it
	trust   func(*http.Request) bool
	onError func(http.ResponseWriter, *http.Request, error)
	logger  *slog.Logger
	methods []string // nil: every method
}

// validate reports what is wrong with c, as Lock panics with it.
func (c Config) validate() error {
	switch {
	case !view.ForHTTP(c.Key):
		// The zero Func, which has no sources, reads nothing.
		return fmt.Errorf("routelock: middleware.Config.Key %v is required and must read HTTP requests", c.Key)
	}
	if c.Policy.Segments > 0 && len(view.Resources(c.Key)) > 1 {
		return fmt.Errorf("%w: middleware.Config: Segments %d with several resources (%v): only one resource can be segmented", lockcore.ErrMisconfigured, c.Policy.Segments, c.Key)
	}
	return nil
}

func newLocker(l lifecycle.Locker, c Config) *locker {
	if l == nil {
		panic("routelock: middleware.Lock: nil Engine")
	}
	if err := c.validate(); err != nil {
		panic(err.Error())
	}
	// Over the Locker's defaults, and checked, once: the requests'
	// acquisitions do neither again.
	p, err := lifecycle.Prepare(l, c.Policy)
	if err != nil {
		panic(fmt.Sprintf("%v (middleware.Config.Policy)", err))
	}
	m := &locker{l: l, full: c.Key, key: c.Key, policy: p, trust: c.TrustToken, onError: c.OnError, logger: c.Logger, methods: slices.Clone(c.Methods)}
	if rs := view.Resources(c.Key); len(rs) > 1 {
		m.key, m.also = rs[0], rs[1:]
	}
	if m.onError == nil {
		m.onError = Error
	}
	m.route = lifecycle.RecordsRoute(l)
	return m
}

// logOnce is what one middleware has logged: the configuration error of
// the route or router next serves, and a path that matched no route.
type logOnce struct{ config, noRoute sync.Once }

func (m *locker) serve(w http.ResponseWriter, r *http.Request, next http.Handler, once *logOnce) {
	if m.methods != nil && !slices.Contains(m.methods, r.Method) {
		m.pass(w, r, next)
		return
	}
	parts, route, err := m.key.HTTP(r)
	if err != nil {
		if m.logger != nil && (errors.Is(err, lockcore.ErrMisconfigured)) {
			once.config.Do(func() {
				m.logger.Error("routelock: the lock's route does not name its key (for a lock before routing: no route of its router does): every request through it is refused with 500",
					"route", routePattern(r), "key", m.key.String(), "err", err)
			})
		}
		if errors.Is(err, chiroute.ErrNoRoute) {
			// A router-wide lock before routing, on a path that no route
			// matches: answer as the router would, without running the
			// rest of the chain, which might rewrite the path into a
			// locked route.
			if m.logger != nil {
				once.noRoute.Do(func() {
					m.logger.Warn("routelock: a router-wide lock saw a path that matches no route of its router and answered 404 itself: middleware that rewrites the path must come before the lock (chi's StripSlashes, CleanPath and URLFormat work on either side)",
						"key", m.key.String())
				})
			}
			notFound(r).ServeHTTP(w, r)
			return
		}
		if errors.Is(err, keyfunc.ErrSkip) {
			m.pass(w, r, next) // not a route of this resource
			return
		}
		m.onError(w, r, err)
		return
	}
	key, err := lockcore.NewKey(parts...)
	if err != nil {
		m.onError(w, r, err)
		return
	}
	if r, err = m.withToken(r); err != nil {
		m.onError(w, r, err)
		return
	}
	p := m.policy
	if m.route {
		p.Route = routeTemplate(r, route)
	}
	if m.also != nil {
		m.serveAll(w, r, next, key, p)
		return
	}
	if p.Segments > 0 {
		m.serveSegment(w, r, next, key, p)
		return
	}
	lease, err := m.l.Acquire(r.Context(), key, p)
	if err != nil {
		m.onError(w, r, err)
		return
	}
	// Deferred, so that a panicking handler releases too; the panic goes on.
	// A failed release has no one to tell: the key expires with its TTL.
	defer lease.Release(r.Context())
	next.ServeHTTP(w, r.WithContext(lease.Context()))
}

// serveAll serves r under the locks of key and of the key functions of
// m.also, taken all or nothing (lifecycle.AcquireAll).
func (m *locker) serveAll(w http.ResponseWriter, r *http.Request, next http.Handler, key lockcore.Key, p lifecycle.Policy) {
	keys := []lockcore.Key{key}
	for _, f := range m.also {
		parts, _, err := f.HTTP(r)
		if err == nil {
			key, err = lockcore.NewKey(parts...)
		}
		if err != nil {
			m.onError(w, r, err)
			return
		}
		keys = append(keys, key)
	}
	leases, err := lifecycle.AcquireAll(r.Context(), m.l, keys, p)
	if err != nil {
		m.onError(w, r, err)
		return
	}
	defer lifecycle.ReleaseAll(r.Context(), leases)
	next.ServeHTTP(w, r.WithContext(leases[len(leases)-1].Context()))
}

// pass serves r unlocked, passing the caller's tokens on, so that a nested
// call further down still re-enters.
func (m *locker) pass(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if r2, err := m.withToken(r); err == nil && r2 != r {
		r = r2
	}
	next.ServeHTTP(w, r)
}

// routePattern returns the pattern of the route r matched, as chi or
// http.ServeMux knows it.
func routePattern(r *http.Request) string {
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		return rctx.RoutePattern()
	}
	return r.Pattern
}

// routeTemplate returns the template of the route r is for, whole even
// where the router has not matched it yet (a router's r.Use, or that of a
// mounted router, whose pattern so far ends in /*): there it is matched,
// the template the key function matched for r, if it matched one, and
// otherwise the route matched from the top as the router is about to, as
// keyfunc.Param does. "" when no router knows r.
func routeTemplate(r *http.Request, matched string) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return r.Pattern
	}
	n := len(rctx.RoutePatterns)
	if rctx.Routes == nil || n > 0 && !strings.HasSuffix(rctx.RoutePatterns[n-1], "/*") {
		return rctx.RoutePattern()
	}
	if matched != "" {
		return matched
	}
	p, t, _ := chiroute.Find(r, rctx)
	chiroute.Release(t)
	if p != "" {
		return p
	}
	return rctx.RoutePattern() // no route: the router answers 404 or 405
}

// notFound returns the handler of r's router for a path no route matches.
func notFound(r *http.Request) http.Handler {
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		if mx, ok := rctx.Routes.(*chi.Mux); ok {
			return mx.NotFoundHandler()
		}
	}
	return http.NotFoundHandler()
}

// withToken returns r with the propagated owner tokens in its context, if
// it may carry them (lifecycle.Intake), and the header removed, whatever it
// holds, so that the handler cannot log it.
func (m *locker) withToken(r *http.Request) (*http.Request, error) {
	vs := r.Header[tokenHeader]
	if len(vs) == 0 {
		return r, nil
	}
	r.Header.Del(tokenHeader)
	var trust func() bool
	if m.trust != nil {
		trust = func() bool { return m.trust(r) }
	}
	ctx, err := lifecycle.Intake(r.Context(), tokenHeader, vs, trust)
	if err != nil {
		return r, err
	}
	return r.WithContext(ctx), nil
}
