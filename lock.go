package lock

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/defaultengine"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redisconf"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// Locker guards routes and methods with locks from one engine: by
// default the Redis engine, which New makes. Create it once per process and
// share it; it is safe for concurrent use. It owns the leases of its
// engine's holds. Give it to package interceptor's server interceptors, or
// to middleware.Lock, to lock with its engine and Defaults.
type Locker struct {
	// core owns the leases of backend's holds. Embedded, so that a Locker
	// is what middleware.Lock and package interceptor take, with no
	// method of its own beyond Acquire for them.
	*core
	engine   lifecycle.Locker             // what requests lock through: core, or core observed
	backend  lockcore.Engine              // the engine of New or FromEngine
	owned    *redisengine.Engine          // the engine New made, closed by Close
	defaults Policy                       // Defaults
	logger   *slog.Logger                 // Logger
	trace    func(context.Context) string // Trace
	watch    *watcher                     // logs what FromEngine's engine does not; nil for none

	// Set by options, read while the Locker is made.
	redis     redisengine.Options // New's engine; its Events, the observers' too
	observers []Observer          // Observe, in the order given
}

// New returns a Locker on a Redis engine (package redisengine, with its
// default options: keys under "routelock:"; a TTL given to Defaults is
// also the engine's Options.TTL, and raises its Options.MaxTTL, the bound
// of every lease and the length of the restart guard, from 30 s when
// longer) on rdb, configured by opts. The Locker does not own rdb: Close leaves it
// open. The engine's instance name, which operators see beside its holds
// and waiters (package admin, the routelock command), is
// "<hostname>-<pid>": a Kubernetes pod's name is its hostname. For other
// engine options, such as a name, a key prefix or replica
// acknowledgements of your own, use NewRedis.
//
// Panics if rdb is nil or a *redis.Ring (see redisengine.New), or an
// option is invalid.
func New(rdb redis.UniversalClient, opts ...Option) *Locker {
	return newRedis(rdb, redisengine.Options{}, opts)
}

// NewRedis is New with the Redis engine's options o, such as an instance
// name, a key prefix or Replicas, which New leaves at their defaults. The
// Locker owns the engine as New's: Logger, Observe and a Defaults TTL
// apply to it (Logger replaces o.Logger, each Observe's Events are told
// beside o.Events, and a Defaults TTL fills in a zero o.TTL), and Close
// closes it.
//
//	locker := lock.NewRedis(rdb, redisengine.Options{Name: "checkout-1", Prefix: "shop:"}, lock.Logger(slog.Default()))
//
// Panics if rdb is nil or a *redis.Ring, or o or an option is invalid.
func NewRedis(rdb redis.UniversalClient, o redisengine.Options, opts ...Option) *Locker {
	return newRedis(rdb, o, opts)
}

// newRedis is NewRedis.
func newRedis(rdb redis.UniversalClient, o redisengine.Options, opts []Option) *Locker {
	if rdb == nil {
		panic("routelock: lock.New(nil)")
	}
	l := &Locker{redis: o}
	l.apply(opts)
	if l.redis.TTL == 0 {
		// The engine's default lease is the Locker's.
		l.redis.TTL = l.defaults.TTL
	}
	if l.redis.MaxTTL == 0 {
		// The bound on leases, which the restart guard lasts, covers the
		// Locker's default lease; Lockers of the same configuration share
		// one server, and so agree on it. Set here, not left to the
		// engine's default (the same 30 s), so that By refuses a route
		// whose lease would exceed it where the route is built.
		l.redis.MaxTTL = max(l.redis.TTL, 30*time.Second)
	}
	e, err := redisengine.New(rdb, l.redis)
	if err != nil {
		panic("routelock: lock.New: " + strings.TrimPrefix(err.Error(), "routelock: "))
	}
	l.owned = e
	l.serve(e)
	return l
}

// FromEngine returns a Locker that takes its locks from e: an engine of
// another backend, a test double such as locktest.Engine, or a Redis
// engine shared with other Lockers (redisengine.New). The Locker owns the
// leases of e's holds: their contexts, re-entry in memory, owner tokens,
// MaxHold, loss, and its observers. Lockers on one engine are one lock
// to a request: a request that holds a key through one re-enters it
// through another, in memory. Close does not close e.
//
// Logger logs what any engine shows the Locker: a lease lost while its
// holder ran (force-released too), and e becoming unavailable and
// answering again. What only the engine sees (the Redis engine's release
// retries, its instance name, a Redis set up wrongly) it logs through its
// own options (redisengine.Options.Logger); NewRedis sets both at once.
//
// Panics if e is nil or an option is invalid.
func FromEngine(e lockcore.Engine, opts ...Option) *Locker {
	if e == nil {
		panic("routelock: lock.FromEngine(nil)")
	}
	l := &Locker{}
	l.apply(opts)
	l.watch = newWatcher(l.logger, false)
	l.serve(e)
	return l
}

// core is the lifecycle of a Locker's leases, which it embeds.
type core = lifecycle.Core

// serve makes the Locker take its locks from e, observed by its
// observers, which are told of the holds' ends and see the routes.
func (l *Locker) serve(e lockcore.Engine) {
	l.backend = e
	l.core = lifecycle.Serve(e, l.redis.Events)
	lifecycle.SetDefaults(l.core, l.defaults)
	l.engine = l.core
	if len(l.observers) > 0 {
		lifecycle.RecordRoutes(l.core)
		var rs []lifecycle.ResultObserver
		for _, o := range l.observers {
			if r, ok := o.(lifecycle.ResultObserver); ok {
				rs = append(rs, r)
			}
		}
		lifecycle.ObserveResults(l.core, rs)
		l.engine = &observed{core: l.core, obs: l.observers}
	}
}

func (l *Locker) apply(opts []Option) {
	for _, o := range opts {
		if o.apply == nil {
			panic("routelock: zero lock.Option")
		}
		o.apply(l)
	}
	if l.logger != nil {
		l.redis.Logger = l.logger // New's engine logs where the Locker does
	}
}

// observed is an engine whose acquisitions its observers see (the
// Locker's engine, when it has observers): each calls the next one's
// Observe, the last given outermost, and the innermost calls the engine.
type observed struct {
	*core
	obs []Observer
}

func (o *observed) Acquire(ctx context.Context, key lockcore.Key, p Policy) (*Lease, error) {
	c := &observation{o: o, i: len(o.obs) - 1, p: p}
	c.key[0] = key
	c.keys = c.key[:]
	c.next = c.step
	leases, err := c.step(ctx, p)
	if err != nil {
		return nil, err
	}
	return leases[0], nil
}

// AcquireGroup takes keys in one exchange when the engine can (see
// lifecycle.AcquireAll), observed as one acquisition; it declines, with no
// observer told, when the engine cannot.
func (o *observed) AcquireGroup(ctx context.Context, keys []lockcore.Key, p Policy) ([]*Lease, error) {
	c := &observation{o: o, i: len(o.obs) - 1, keys: keys, group: true, p: p}
	c.next = c.step
	return c.step(ctx, p)
}

// observation is one acquisition on its way through the observers: each
// calls next, which is step, and the innermost step calls the engine. One
// allocation for the lot (and one for next), whatever the observers.
type observation struct {
	o     *observed
	i     int // the observer step calls next; -1: the engine
	keys  []lockcore.Key
	key   [1]lockcore.Key // keys, for one key
	ls    [1]*Lease       // the result, for one key
	group bool            // take keys in one exchange (lifecycle.AcquireGroup)
	p     Policy          // as the observers were given it
	next  func(context.Context, Policy) ([]*Lease, error)
}

// step calls the next observer, the outermost first, with next; or, past
// the innermost, the engine. Each observer calls next once (see
// Observer), so the observers are passed in turn.
func (c *observation) step(ctx context.Context, p Policy) ([]*Lease, error) {
	if c.i >= 0 {
		ob := c.o.obs[c.i]
		c.i--
		// Never prepared (lifecycle.Prepare) in an observer's hands: a
		// Policy it keeps and changes is checked as any other, and it
		// compares equal to the same fields written by hand.
		return ob.Observe(ctx, c.keys, lifecycle.Recheck(p), c.next)
	}
	q := lifecycle.Recheck(p)
	q.Route, q.Trace = c.p.Route, c.p.Trace
	if q == lifecycle.Recheck(c.p) {
		// The observers changed at most its labels: as prepared as given.
		q = c.p
		q.Route, q.Trace = p.Route, p.Trace
		p = q
	} else {
		// An observer changed more than its labels: checked afresh.
		p = lifecycle.Recheck(p)
	}
	if c.group {
		return lifecycle.AcquireGroup(ctx, c.o.core, c.keys, p)
	}
	ls, err := c.o.core.Acquire(ctx, c.keys[0], p)
	if err != nil {
		return nil, err
	}
	c.ls[0] = ls
	return c.ls[:], nil
}

// Acquire takes the lock on key from the Locker's engine (through its
// observers), with p's zero fields taken from the Locker's Defaults. A
// context that holds key through a Locker on the same engine re-enters
// its hold in memory. The lease's context derives from ctx; release the
// lease once.
func (l *Locker) Acquire(ctx context.Context, key lockcore.Key, p Policy) (*Lease, error) {
	if l.trace != nil && p.Trace == "" {
		p.Trace = l.trace(ctx)
	}
	ls, err := l.engine.Acquire(ctx, key, lifecycle.Over(l, p))
	if l.watch != nil {
		l.watch.acquired(key, ls, err)
	}
	return ls, err
}

// AcquireAll takes the locks of keys all or nothing, from the Locker's
// engine (through its observers), with p's zero fields taken from the
// Locker's Defaults: in one order whatever the order of keys (by key), so
// that two requests that name the same keys never deadlock, with one wait
// budget for the lot, and in one exchange when the engine can
// (lockcore.Batch). middleware.Lock and package interceptor take a route's
// several resources (keyfunc.Func.Also) with it.
func (l *Locker) AcquireAll(ctx context.Context, keys []lockcore.Key, p Policy) ([]*Lease, error) {
	if l.trace != nil && p.Trace == "" {
		p.Trace = l.trace(ctx)
	}
	ls, err := lifecycle.AcquireAll(ctx, l.engine, keys, lifecycle.Over(l, p))
	if l.watch != nil {
		if err != nil {
			l.watch.acquired(lockcore.Key{}, nil, err)
		}
		for _, s := range ls {
			l.watch.acquired(s.Key(), s, nil)
		}
	}
	return ls, err
}

// Close stops the background work of the Redis engine that New made (lease
// renewal and the release notifications). Locks still held are no longer
// renewed and expire with their TTL; handlers still running see their
// context cancelled with cause lockcore.ErrLockLost. Close is idempotent. It does
// nothing to the engine of FromEngine.
func (l *Locker) Close() error {
	if l.owned == nil {
		return nil
	}
	return l.owned.Close()
}

// Check verifies that the Locker's engine can work, when the engine can
// tell (the Redis engine: connectivity, credentials, database, scripting,
// notifications, server version; see redisengine.Engine.Check). Call it at startup: an
// error matching lockcore.ErrMisconfigured will not mend itself, one
// matching lockcore.ErrUnavailable may.
//
//	if err := locker.Check(ctx); err != nil {
//		log.Fatal(err)
//	}
func (l *Locker) Check(ctx context.Context) error {
	if c, ok := l.backend.(interface{ Check(context.Context) error }); ok {
		return c.Check(ctx)
	}
	return nil
}

// Operator returns the Locker's engine as a lockcore.Operator, for listing,
// inspecting and force-releasing its locks (package admin, the routelock
// command), or nil when the engine cannot do that. The Redis engine can.
func (l *Locker) Operator() lockcore.Operator {
	op, _ := l.backend.(lockcore.Operator)
	return op
}

// By returns middleware that locks the resource key names while the next
// handler runs, acquired with the Policy of ps over the Locker's Defaults
// (each field the last non-zero one given):
//
//	r.With(locker.By(keyfunc.Join(keyfunc.Param("productID"), keyfunc.Header("X-User-ID")))).Post(...)
//
// On a route whose pattern lacks a route parameter of key the request gets
// 500, a configuration error (see Logger); in a router's own r.Use, which
// runs before the router matched the route, such a route passes through
// unlocked. A request with a missing or invalid value gets 400. In each
// case the handler does not run unlocked. See package middleware for the
// whole flow, and middleware.Lock for what else a route may set (the HTTP
// methods that lock, which callers may bring tokens, the refusal's
// response).
//
// Panics if key is zero or cannot read HTTP requests (interceptor.Field),
// or the Policy is invalid, or its TTL is longer than the Redis engine's
// redisengine.Options.MaxTTL (30 s, or the Defaults TTL when longer).
func (l *Locker) By(key keyfunc.Func, ps ...Policy) func(http.Handler) http.Handler {
	p := lifecycle.Over(l, policy(ps))
	if l.owned != nil && p.TTL > l.redis.MaxTTL {
		panic(fmt.Sprintf("routelock: Locker.By: TTL %v is longer than the engine's redisengine.Options.MaxTTL %v, the bound of every lease that the restart guard waits out: raise MaxTTL on every instance (lock.NewRedis)", p.TTL, l.redis.MaxTTL))
	}
	var e lifecycle.Locker = l.engine
	if l.trace != nil || l.watch != nil || lifecycle.RecordsRoute(l) {
		// Acquire labels each acquisition with its trace id, or logs; and
		// observers or operators see routes.
		e = l
	}
	return middleware.Lock(e, middleware.Config{
		Key:    key,
		Policy: p,
		Logger: l.logger,
	})
}

// ByParam is By(keyfunc.Param(name), ps...): it locks the resource named
// by route parameter name, such as {productID} in /products/{productID}/buy.
// With chi it works in r.With, in r.Group and r.Route, and in the router's
// own r.Use, where it locks exactly the routes that have the parameter; on
// one route (r.With, r.Group) whose pattern lacks it, requests get 500, and
// so do all requests through a router-wide one when no route of the router
// has it. A router-wide lock matches the route ahead of the router, after
// the rewrites of chi's StripSlashes, CleanPath and URLFormat wherever they
// are in the router's stack; put other middleware that rewrites the path
// before the lock: a path that no route matches, for any method, gets the
// router's 404 from the lock, without the rest of the chain. Routes that
// lock the same resource under different parameter names share the lock
// when their keys are renamed alike: By(keyfunc.Param("id").As("productID")).
func (l *Locker) ByParam(name string, ps ...Policy) func(http.Handler) http.Handler {
	return l.By(keyfunc.Param(name), ps...)
}

// Idempotent returns middleware that runs each request once per
// Idempotency-Key: a retry, or a duplicate sent while the first runs, gets
// the first one's response, stored in Redis with its lock's release and
// kept 24 hours. Keys are scoped by the route and the method; to scope
// them by the caller too, and for the other settings, use
// middleware.Idempotency. ps is how a duplicate waits (Wait, FailFast)
// and the lease (TTL, MaxHold).
//
//	r.With(locker.Idempotent()).Post("/payments", pay)
//
// Panics if the Policy is invalid or shares or splits the lock, or the
// engine keeps no results (lockcore.Promises.Results).
func (l *Locker) Idempotent(ps ...Policy) func(http.Handler) http.Handler {
	var e lifecycle.Locker = l.engine
	if l.trace != nil || l.watch != nil || lifecycle.RecordsRoute(l) {
		e = l
	}
	return middleware.Idempotency(e, middleware.IdempotencyConfig{
		Policy: lifecycle.Over(l, policy(ps)),
		Logger: l.logger,
	})
}

// The default Locker.
var (
	defaultMu   sync.Mutex
	defaultL    atomic.Pointer[Locker]
	defaultOwns io.Closer // what defaultLocker opened itself: its client, or engine
)

// closerFunc is a func() as an io.Closer.
type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

// SetDefault makes l the Locker that the package-level helpers (ByParam,
// By) use. They look it up on every request, so SetDefault may come after
// the routes are built, as long as it comes before the first request.
//
// When SetDefault was not called, the helpers use a Locker of their own on
// a client of their own, made at the first locked request, on the Redis
// that one of these environment variables names:
//   - REDIS_URL, one server, in redis.ParseURL syntax, such as
//     redis://:password@host:6379/0;
//   - REDIS_CLUSTER_URL, a Redis Cluster, in redis.ParseClusterURL syntax,
//     such as redis://:password@node1:6379?addr=node2:6379&addr=node3:6379;
//   - REDIS_SENTINEL_URL, a master behind Sentinel, in
//     redis.ParseFailoverURL syntax, such as
//     redis://sentinel1:26379?addr=sentinel2:26379&master_name=mymaster&password=...;
//
// or localhost:6379 when none is set; setting more than one is an error.
// It connects lazily: an unreachable Redis shows as 503 responses. Making
// it logs once, with slog.Default, which Redis it uses (never the
// password) and that SetDefault was not called. SetDefault closes that
// Locker and its client. SetDefault(nil) undoes SetDefault.
//
// ETCD_ENDPOINTS, comma-separated etcd client URLs such as
// http://etcd1:2379,http://etcd2:2379, makes that Locker one on etcd
// instead, when the program imports github.com/routelock/lock/etcdengine
// (which links etcd's client, in a module of its own); set without that
// import, or together with a REDIS_ variable, it is an error when a route
// is built.
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

// defaultLocker returns the Locker set by SetDefault. When none was set, it
// creates one on a client of its own, on the Redis the environment names
// (see SetDefault).
//
// Panics if that cannot be parsed. The package-level By and ByParam check
// the environment when they build a route, unless a Locker is set, so that
// a malformed URL stops the program at startup rather than at a request.
func defaultLocker() *Locker {
	if l := defaultL.Load(); l != nil {
		return l
	}
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if l := defaultL.Load(); l != nil {
		return l
	}
	conf, err := defaultConf()
	if err != nil {
		panic(err.Error())
	}
	if conf.etcd != nil {
		e, where, closeAll, err := conf.etcd(os.Getenv)
		if err != nil {
			panic(fmt.Sprintf("%v; or call lock.SetDefault before building routes", err))
		}
		l := FromEngine(e)
		slog.Default().Warn("routelock: lock.SetDefault was not called: the package-level helpers use a Locker of their own",
			"etcd", where, "from", etcdVar)
		defaultOwns = closerFunc(closeAll)
		defaultL.Store(l)
		return l
	}
	// This client is the package's own: it applies context deadlines, so
	// the engine's calls need no goroutine of their own to keep them.
	rdb := conf.Open(func(o *redisconf.Common) { *o.ContextTimeoutEnabled = true })
	l := New(rdb)
	// Say which Redis, never the password or the URL that may hold one:
	// instances that each fall back to their own localhost:6379 exclude
	// nothing from each other.
	from := conf.Var
	if from == "" {
		from = "localhost:6379, " + redisconf.Server + ", " + redisconf.Cluster + " and " + redisconf.Sentinel + " being empty"
	}
	slog.Default().Warn("routelock: lock.SetDefault was not called: the package-level helpers use a Locker of their own",
		"redis", conf.Where, "from", from)
	defaultOwns = rdb
	defaultL.Store(l)
	return l
}

// RedisFromEnv returns a new client of the Redis that the environment
// names, as the package-level helpers' own Locker reads it (see
// SetDefault): REDIS_URL for one server, REDIS_CLUSTER_URL for a Redis
// Cluster, REDIS_SENTINEL_URL for a master behind Sentinel, at most one of
// them, or localhost:6379 when none is set. The client applies context
// deadlines (ContextTimeoutEnabled), as the README's does; the caller
// closes it. The error names the variable and the syntax it takes, never
// its value, which may hold a password.
//
//	rdb, err := lock.RedisFromEnv()
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer rdb.Close()
//	locker := lock.New(rdb)
func RedisFromEnv() (redis.UniversalClient, error) {
	conf, err := redisconf.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("routelock: %w", err)
	}
	return conf.Open(func(o *redisconf.Common) { *o.ContextTimeoutEnabled = true }), nil
}

// defaultSource is where the default Locker takes its locks: the Redis of
// Config, or, when etcd is not nil, the etcd engine it opens.
type defaultSource struct {
	redisconf.Config
	etcd defaultengine.Opener
}

// etcdVar is the variable that names the default Locker's etcd.
const etcdVar = defaultengine.EtcdEndpoints

// defaultConf reads the default Locker's Redis, or etcd, from the
// environment. The error shows the expected form and never the value,
// which may hold a password.
func defaultConf() (defaultSource, error) {
	if os.Getenv(etcdVar) != "" {
		for _, v := range []string{redisconf.Server, redisconf.Cluster, redisconf.Sentinel} {
			if os.Getenv(v) != "" {
				return defaultSource{}, fmt.Errorf("routelock: %s and %s are both set: set one, for etcd or for Redis; or call lock.SetDefault before building routes", etcdVar, v)
			}
		}
		etcd := defaultengine.EtcdEngine()
		if etcd == nil {
			return defaultSource{}, fmt.Errorf("routelock: %s is set, but the program does not link the etcd engine: import _ %q; or call lock.SetDefault before building routes", etcdVar, defaultengine.EtcdModule)
		}
		if err := etcd.Check(os.Getenv); err != nil {
			return defaultSource{}, fmt.Errorf("%w; or call lock.SetDefault before building routes", err)
		}
		return defaultSource{etcd: etcd.Open}, nil
	}
	c, err := redisconf.FromEnv(os.Getenv)
	if err != nil {
		return defaultSource{}, fmt.Errorf("routelock: %w; or call lock.SetDefault before building routes", err)
	}
	return defaultSource{Config: c}, nil
}

// By is By of the default Locker (see SetDefault), looked up at each
// request.
//
// Panics if key or the Policy is invalid, as Locker.By does, when called;
// and, when no Locker is set (SetDefault), if the Redis URL of the
// environment cannot be parsed.
func By(key keyfunc.Func, ps ...Policy) func(http.Handler) http.Handler {
	// Lock panics now, at startup, on what any Locker would refuse.
	middleware.Lock(unbuilt, middleware.Config{Key: key, Policy: policy(ps)})
	if defaultL.Load() == nil {
		if _, err := defaultConf(); err != nil {
			panic(err.Error())
		}
	}
	return func(next http.Handler) http.Handler { return &deferred{key: key, ps: ps, next: next} }
}

// deferred is a package-level route's middleware around next, built for
// the default Locker of each request.
type deferred struct {
	key  keyfunc.Func
	ps   []Policy
	next http.Handler
	cur  atomic.Pointer[bound]
}

func (d *deferred) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l := defaultLocker()
	b := d.cur.Load()
	if b == nil || b.l != l {
		b = &bound{l: l, h: l.By(d.key, d.ps...)(d.next)}
		d.cur.Store(b)
	}
	b.h.ServeHTTP(w, r)
}

// LockKey returns the key function the middleware locks on, and nil: it
// locks every HTTP method. middleware.Check reads it.
func (d *deferred) LockKey() (keyfunc.Func, []string) { return d.key, nil }

// unbuilt is the Locker that a package-level route is checked against
// while the Locker it will use is not known yet; it is never called. Its
// engine makes every promise, so that a route is checked against its own
// Locker's engine once that is known.
var unbuilt = lifecycle.Serve(promisesAll{}, nil)

// promisesAll is unbuilt's engine.
type promisesAll struct{}

func (promisesAll) Take(context.Context, lockcore.Request) (lockcore.Hold, error) {
	return nil, lockcore.ErrClosed
}

func (promisesAll) Promises() lockcore.Promises {
	return lockcore.Promises{FIFO: true, OrderedFences: true, TokenReentry: true, Shared: true, Permits: true}
}

func (promisesAll) Close() error { return nil }

// bound is a package-level route's middleware built for one Locker.
type bound struct {
	l *Locker
	h http.Handler
}

// ByParam is ByParam of the default Locker (see SetDefault), looked up at
// each request:
//
//	r.Use(lock.ByParam("productID"))
func ByParam(name string, ps ...Policy) func(http.Handler) http.Handler {
	return By(keyfunc.Param(name), ps...)
}

// FencingToken returns the fencing token of the innermost lock that ctx
// (a handler's r.Context()) holds: strictly greater than that of every
// earlier hold of the key. Pass it to the store you write, so that it can
// refuse writes from a holder whose lease has ended.
func FencingToken(ctx context.Context) (int64, bool) {
	if held := lifecycle.HeldFrom(ctx); len(held) > 0 {
		return held[0].Fence, true
	}
	return 0, false
}

// Slot returns the slot that ctx's innermost lock holds among its
// resource's n: a number 0..n-1 that no other request holding the resource
// has meanwhile, such as the part of the stock to take from. On a route
// with Permits(n) it is the request's permit; on a route with Segments(n),
// its segment (after NextSegment moved the request, the new one). ok is
// false for a lock of neither kind.
//
//	slot, ok := lock.Slot(r.Context())
func Slot(ctx context.Context) (int, bool) {
	held := lifecycle.HeldFrom(ctx)
	if len(held) == 0 {
		return 0, false
	}
	if held[0].Slot >= 0 {
		return held[0].Slot, true
	}
	if _, i, ok := lifecycle.Segmented(held[0].Key); ok {
		return i, true
	}
	return 0, false
}

// NextSegment moves the request from its segment, found exhausted (its
// part of the stock sold), to another open segment of the resource, in
// place: it closes the segment's gate, so that no request is given it
// again until it is opened (admin, routelock open), takes the lock of
// another open segment and releases the old one. The handler runs on, once,
// with the same context, which the move does not cancel; Slot,
// FencingToken, Keys and Fences then report the new segment, and a loss of
// its lock cancels the context with ErrLockLost. So a handler reads its
// segment's stock, and moves on until it finds some:
//
//	seg, _ := lock.Slot(r.Context())
//	for stock[seg] == 0 {
//		if err := lock.NextSegment(r.Context()); err != nil {
//			middleware.Error(w, r, err) // 410 sold out, 409 busy
//			return
//		}
//		seg, _ = lock.Slot(r.Context())
//	}
//
// When no other segment is open, it closes the resource's gate too, as
// SoldOut does, and returns an error matching lockcore.ErrGateClosed: the
// request keeps its exhausted segment until the handler returns, and
// answers it (middleware.Error: 410 Gone; interceptor.Status:
// FailedPrecondition); from then on every instance answers 410 from
// memory. When every other open segment is busy it fails with the
// *lockcore.ContentionError (409, codes.Aborted): at once with FailFast;
// otherwise it waits for the first open segment numbered above its own,
// up to what is left of the route's Wait (then lockcore.ErrWaitTimeout),
// and tries those below once: the request holds its segment while it
// waits, and two requests moving on must never wait for each other. It fails as SoldOut does, and with an error
// matching lockcore.ErrMisconfigured when the innermost lock is not a
// segment's. When Redis did not confirm the gate's write
// (lockcore.ErrUnavailable), the request moves on all the same.
func NextSegment(ctx context.Context) error {
	return lifecycle.NextSegment(ctx)
}

// SoldOut closes the gate of the resource of the innermost lock ctx holds
// (a handler's: its route's resource, all its segments on a route with
// Segments) for d, or until it is opened again
// when d is 0. From then on every instance answers requests for that
// resource at once, 410 Gone over HTTP and FailedPrecondition over gRPC
// (with a google.rpc.ErrorInfo of reason "SOLD_OUT"), without a call to
// Redis and without running the handler; the other instances hear of it
// within milliseconds (on one Redis, by a message to each Engine's
// subscription). The request that closes it goes on under its lock.
//
//	if stock == 0 {
//		_ = lock.SoldOut(r.Context(), 0)
//		http.Error(w, "sold out", http.StatusGone)
//		return
//	}
//
// It fails with an error matching lockcore.ErrInvalidKey when ctx holds
// no lock, lockcore.ErrLockLost when its innermost lock is no longer held,
// lockcore.ErrMisconfigured when its engine has no gates or the route
// names several resources (keyfunc.Func.Also: say which one is sold out
// with the engine's CloseGate and its key), and lockcore.ErrUnavailable
// when Redis did not confirm the write: then no instance closes it (the
// handlers that find the stock empty close it again), unless the write
// landed after all, when every one does. Under memory pressure (Redis at
// its maxmemory, noeviction) the write is still taken.
//
// The gate refuses the routes that take from the resource, exclusive ones
// and Permits; a reader route (Shared), such as the product's page, still
// runs and can show that none is left, and so does a restock route
// (Restock), whose handler reopens the gate (InStock). A newly started
// instance refuses the resource from its first request. The gate is kept
// in Redis: it survives a restart of Redis that keeps its data (an
// append-only file), and is gone after one that does not, when the
// handlers that find the stock empty close it again (see docs/modes.md).
// Closing a gate that is closed until opened writes nothing, as the buyers
// still waiting find it one after another.
func SoldOut(ctx context.Context, d time.Duration) error {
	return lifecycle.CloseGate(ctx, d)
}

// InStock opens the gate that SoldOut closed, of the resource of the
// innermost lock ctx holds, as the handler of a restock route (Restock)
// does once the stock is back; on a resource split into segments, the
// segments' gates first, then the resource's. Every instance sells it
// again within milliseconds.
//
//	r.With(locker.ByParam("productID", lock.Restock())).Post("/products/{productID}/restock", func(w http.ResponseWriter, r *http.Request) {
//		stock += 100
//		if err := lock.InStock(r.Context()); err != nil {
//			http.Error(w, "restocked; the gate is still closed: retry", http.StatusServiceUnavailable)
//		}
//	})
//
// Opening an open gate is no error. It fails as SoldOut does; when Redis
// did not confirm the write (lockcore.ErrUnavailable), no instance opens
// it, unless the write landed after all.
func InStock(ctx context.Context) error {
	return lifecycle.OpenGate(ctx)
}

// Keys returns the keys of the locks ctx holds, innermost first, such as
// ["productID:42"].
func Keys(ctx context.Context) []string {
	held := lifecycle.HeldFrom(ctx)
	keys := make([]string, len(held))
	for i, h := range held {
		keys[i] = h.Key.String()
	}
	return keys
}

// Fences returns the fencing tokens of the locks ctx holds, innermost
// first, in the order Keys gives their keys: the fence of each of a
// route's several resources (keyfunc.Func.Also), to pass to the store
// that keeps each.
func Fences(ctx context.Context) []int64 {
	held := lifecycle.HeldFrom(ctx)
	fences := make([]int64, len(held))
	for i, h := range held {
		fences[i] = h.Fence
	}
	return fences
}
