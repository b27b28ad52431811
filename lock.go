package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/config"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// Locker guards routes and methods with locks from one engine: by
// default the Redis engine, which New makes. Create it once per process and
// share it; it is safe for concurrent use.
type Locker struct {
	engine lockcore.Engine     // what requests lock through: base, or a wrapper of it
	base   lockcore.Engine     // the engine of New or FromEngine
	owned  *redisengine.Engine // the engine New made, closed by Close
	opts   []Option            // as given to New or FromEngine
	cfg    config.Config       // defaults of its routes
}

// New returns a Locker on a Redis engine (package redisengine) on rdb,
// configured by opts (see Option). The Locker does not own rdb: Close leaves
// it open.
//
// Panics if rdb is nil or a *redis.Ring (see redisengine.New), or an
// option is invalid.
func New(rdb redis.UniversalClient, opts ...Option) *Locker {
	if rdb == nil {
		panic("lock: New(nil)")
	}
	l := &Locker{opts: slices.Clone(opts)}
	l.cfg.ApplyAll(config.InNew|config.InRedis, opts)
	e, err := redisengine.New(rdb, l.cfg.Redis)
	if err != nil {
		panic("lock: New: " + err.Error())
	}
	l.base, l.owned = e, e
	l.engine = l.cfg.WrapEngine(e)
	return l
}

// FromEngine returns a Locker that takes its locks from e: another backend,
// or a wrapper around one (telemetry, a test double). Its options are those
// of New less the Redis engine's own (Prefix, RedisOptions). Close does not
// close e.
//
// Panics if e is nil or an option is invalid here.
func FromEngine(e lockcore.Engine, opts ...Option) *Locker {
	if e == nil {
		panic("lock: FromEngine(nil)")
	}
	l := &Locker{base: e, opts: slices.Clone(opts)}
	l.cfg.ApplyAll(config.InNew, opts)
	l.engine = l.cfg.WrapEngine(e)
	return l
}

// Close stops the background work of the Redis engine that New made (lease
// renewal and the release notifications). Locks still held are no longer
// renewed and expire with their TTL; handlers still running see their
// context cancelled with cause ErrLockLost. Close is idempotent. It does
// nothing to the engine of FromEngine.
func (l *Locker) Close() error {
	if l.owned == nil {
		return nil
	}
	return l.owned.Close()
}

// Check verifies that the Locker's engine can work, when the engine can
// tell (the Redis engine of New: connectivity, credentials, database,
// scripting, notifications, server version; see redisengine.Engine.Check),
// also through a wrapper of the engine given to FromEngine that has an
// Unwrap() lockcore.Engine method (as lockotel's does). Call it at startup: an error matching ErrMisconfigured will not mend
// itself, one matching ErrUnavailable may.
//
//	if err := locker.Check(ctx); err != nil {
//		log.Fatal(err)
//	}
func (l *Locker) Check(ctx context.Context) error {
	if c, ok := find[interface{ Check(context.Context) error }](l.base); ok {
		return c.Check(ctx)
	}
	return nil
}

// Engine returns the engine the Locker takes its locks from, for locking
// outside a request (lockcore.Engine.Acquire). For New it is a
// *redisengine.Engine, unless Observe wraps it (package lockotel's
// telemetry); see Operator for the engine's operations.
func (l *Locker) Engine() lockcore.Engine { return l.engine }

// Operator returns the Locker's engine as a lockcore.Operator, for listing,
// inspecting and force-releasing its locks (package admin, the routelock
// command), or nil when the engine cannot do that. The Redis engine of New
// can, also when the engine given to FromEngine wraps it and has an
// Unwrap() lockcore.Engine method (as lockotel's does).
func (l *Locker) Operator() lockcore.Operator {
	op, _ := find[lockcore.Operator](l.base)
	return op
}

// find returns e as a T, or the first engine that is one among those that
// e wraps, through wrappers that say what they wrap with an Unwrap()
// lockcore.Engine method (lockotel's), a few deep.
func find[T any](e lockcore.Engine) (T, bool) {
	for range 8 {
		if t, ok := e.(T); ok {
			return t, true
		}
		u, ok := e.(interface{ Unwrap() lockcore.Engine })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	var zero T
	return zero, false
}

// Options returns the options given to New or FromEngine, which package
// grpclock applies to its methods as the Locker's defaults.
func (l *Locker) Options() []Option { return slices.Clone(l.opts) }

// By returns middleware that locks the resource key names while the next
// handler runs:
//
//	r.With(locker.By(keyfunc.Join(keyfunc.Param("productID"), keyfunc.Header("X-User-ID")))).Post(...)
//
// On a route whose pattern lacks a route parameter of key the request gets
// 500, a configuration error (see Logger); in a router's own r.Use, which
// runs before the router matched the route, such a route passes through
// unlocked. A request with a missing or invalid value gets 400. In each
// case the handler does not run unlocked. See package middleware for the
// whole flow.
//
// Panics if key is zero or cannot read HTTP requests (interceptor.Field),
// or an option is invalid here.
func (l *Locker) By(key keyfunc.Func, opts ...Option) func(http.Handler) http.Handler {
	c := l.cfg
	c.ApplyAll(config.InRoute, opts)
	if c.Name != "" {
		key = key.As(c.Name)
	}
	return middleware.Lock(l.engine, middleware.Config{
		Key:        key,
		Wait:       c.Wait,
		TTL:        c.TTL,
		TrustToken: c.Trust,
		OnError:    c.OnError,
		Logger:     c.Logger,
		Methods:    c.Methods,
	})
}

// ByParam is By(keyfunc.Param(name), opts...): it locks the resource named
// by route parameter name, such as {productID} in /products/{productID}/buy.
// With chi it works in r.With, in r.Group and r.Route, and in the router's
// own r.Use, where it locks exactly the routes that have the parameter; on
// one route (r.With, r.Group) whose pattern lacks it, requests get 500, and
// so do all requests through a router-wide one when no route of the router
// has it. A router-wide lock matches the route ahead of the router, after
// the rewrites of chi's StripSlashes, CleanPath and URLFormat wherever they
// are in the router's stack; put other middleware that rewrites the path
// before the lock: a path that no route matches, for any method, gets the
// router's 404 from the lock, without the rest of the chain.
func (l *Locker) ByParam(name string, opts ...Option) func(http.Handler) http.Handler {
	return l.By(keyfunc.Param(name), opts...)
}

// Transport returns a RoundTripper that propagates the owner tokens of the
// request's context to the services it calls, so that they re-enter the
// locks this request holds (see middleware.Transport). base nil means
// http.DefaultTransport.
func (l *Locker) Transport(base http.RoundTripper) http.RoundTripper {
	return middleware.Transport(base)
}

// The default Locker.
var (
	defaultMu   sync.Mutex
	defaultL    atomic.Pointer[Locker]
	defaultOwns *redis.Client // the client Default opened itself
)

// SetDefault makes l the Locker that the package-level helpers (ByParam,
// By) use. They look it up on every request, so SetDefault may come after
// the routes are built, as long as it comes before the first request. If
// Default had connected on its own, SetDefault closes that Locker and its
// client. SetDefault(nil) undoes SetDefault.
func SetDefault(l *Locker) {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	old := defaultL.Swap(l)
	if defaultOwns != nil && old != nil {
		old.Close()
		defaultOwns.Close()
		defaultOwns = nil
	}
}

// Default returns the Locker set by SetDefault. When none was set, it
// creates one on a client of its own, on the Redis that the REDIS_URL
// environment variable names (redis.ParseURL syntax, such as
// redis://:password@host:6379/0), or localhost:6379 when REDIS_URL is
// empty. It connects lazily: an unreachable Redis shows as 503 responses.
// Creating it logs once, with slog.Default, the address and database of the
// Redis it uses (never the password) and that SetDefault was not called.
//
// Panics if REDIS_URL cannot be parsed. The package-level By and ByParam
// check REDIS_URL when they build a route, unless a Locker is set, so that
// a malformed one stops the program at startup rather than at a request.
func Default() *Locker {
	if l := defaultL.Load(); l != nil {
		return l
	}
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if l := defaultL.Load(); l != nil {
		return l
	}
	opt, err := defaultOptions()
	if err != nil {
		panic(err.Error())
	}
	// This client is the package's own: it applies context deadlines, so
	// the engine's calls need no goroutine of their own to keep them.
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	l := New(rdb)
	// Say which Redis, never the password or the URL that may hold one:
	// instances that each fall back to their own localhost:6379 exclude
	// nothing from each other.
	slog.Default().Warn("routelock: lock.SetDefault was not called: the package-level helpers use a Locker of their own",
		"addr", opt.Addr, "db", opt.DB, "from", defaultSource())
	defaultOwns = rdb
	defaultL.Store(l)
	return l
}

// defaultSource says where Default's Redis comes from.
func defaultSource() string {
	if os.Getenv("REDIS_URL") == "" {
		return "localhost:6379, REDIS_URL being empty"
	}
	return "REDIS_URL"
}

// defaultOptions returns the client options of REDIS_URL, or of
// localhost:6379 when it is empty. The error shows the expected form and
// never the value, which may hold a password.
func defaultOptions() (*redis.Options, error) {
	u := os.Getenv("REDIS_URL")
	if u == "" {
		return &redis.Options{Addr: "localhost:6379"}, nil
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password and all
		}
		return nil, fmt.Errorf("lock: REDIS_URL is not a Redis URL (%v): want redis://[user:password@]host:6379/0, rediss:// for TLS, or unix:///path/to/redis.sock; or call lock.SetDefault before building routes", err)
	}
	return opt, nil
}

// By is Default().By(key, opts...), with Default looked up at each request
// (see SetDefault).
//
// Panics if key or an option is invalid, as Locker.By does, when called;
// and, when no Locker is set (SetDefault), if REDIS_URL cannot be parsed.
func By(key keyfunc.Func, opts ...Option) func(http.Handler) http.Handler {
	var c config.Config
	c.ApplyAll(config.InRoute, opts)
	if c.Name != "" {
		key = key.As(c.Name)
	}
	if err := (middleware.Config{Key: key, TTL: c.TTL}).Validate(); err != nil {
		panic(err.Error())
	}
	if defaultL.Load() == nil {
		if _, err := defaultOptions(); err != nil {
			panic(err.Error())
		}
	}
	return func(next http.Handler) http.Handler {
		var cur atomic.Pointer[bound]
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l := Default()
			b := cur.Load()
			if b == nil || b.l != l {
				b = &bound{l: l, h: l.By(key, opts...)(next)}
				cur.Store(b)
			}
			b.h.ServeHTTP(w, r)
		})
	}
}

// bound is a package-level route's middleware built for one Locker.
type bound struct {
	l *Locker
	h http.Handler
}

// ByParam is Default().ByParam(name, opts...), with Default looked up at
// each request:
//
//	r.Use(lock.ByParam("productID"))
func ByParam(name string, opts ...Option) func(http.Handler) http.Handler {
	return By(keyfunc.Param(name), opts...)
}

// Transport is middleware.Transport: see Locker.Transport.
func Transport(base http.RoundTripper) http.RoundTripper { return middleware.Transport(base) }

// FencingToken returns the fencing token of the innermost lock that ctx
// (a handler's r.Context()) holds: strictly greater than that of every
// earlier hold of the key. Pass it to the store you write, so that it can
// refuse writes from a holder whose lease has ended.
func FencingToken(ctx context.Context) (int64, bool) {
	if held := lockcore.HeldFrom(ctx); len(held) > 0 {
		return held[0].Fence, true
	}
	return 0, false
}

// Keys returns the keys of the locks ctx holds, innermost first, such as
// ["productID:42"].
func Keys(ctx context.Context) []string {
	held := lockcore.HeldFrom(ctx)
	keys := make([]string, len(held))
	for i, h := range held {
		keys[i] = h.Key.String()
	}
	return keys
}
