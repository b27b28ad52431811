package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// discard is a ResponseWriter that costs nothing, so that the benchmarks
// measure the handler chain and not the recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs fn b.N times and reports the process CPU per operation
// besides the wall time (ns/op) and allocations that -benchmem reports.
func measure(b *testing.B, fn func()) {
	b.ReportAllocs()
	fn() // warm: scripts loaded, connections dialled
	b.ResetTimer()
	start := cpuTime()
	for b.Loop() {
		fn()
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// routers are the benchmarks' chi routers on one Locker of rdb: the route
// POST /products/{productID}/buy with a handler that writes "ok", bare,
// behind the middleware in r.With, and behind it in the router's r.Use
// (which resolves the route itself).
type routers struct {
	l               *redisengine.Engine
	bare, with, use http.Handler
}

func newRouters(b *testing.B, rdb *redis.Client) routers {
	l, err := redisengine.New(rdb, redisengine.Options{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	handler := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }
	mw := middleware.Lock(lifecycle.Serve(l, nil), middleware.Config{Key: keyfunc.Param("productID")})
	bare := chi.NewRouter()
	bare.Post("/products/{productID}/buy", handler)
	with := chi.NewRouter()
	with.With(mw).Post("/products/{productID}/buy", handler)
	use := chi.NewRouter()
	use.Use(mw)
	use.Post("/products/{productID}/buy", handler)
	return routers{l: l, bare: bare, with: with, use: use}
}

// serial runs one sub-benchmark per router, each a request on product 42,
// timed by run (measure, or a plain loop).
func (rs routers) serial(b *testing.B, run func(b *testing.B, fn func())) {
	req := httptest.NewRequest("POST", "/products/42/buy", nil)
	w := &discard{h: http.Header{}}
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", rs.bare}, {"locked-With", rs.with}, {"locked-Use", rs.use}} {
		b.Run(bc.name, func(b *testing.B) { run(b, func() { bc.h.ServeHTTP(w, req) }) })
	}
}

// loop runs fn b.N times, reporting allocations.
func loop(b *testing.B, fn func()) {
	b.ReportAllocs()
	for b.Loop() {
		fn()
	}
}

// BenchmarkMiddleware measures what the middleware adds to a request on an
// uncontended key: the same chi route and handler bare, behind the
// middleware (r.With, and the router's r.Use that matches the route
// itself), the engine alone (acquire + release), and two PINGs, the floor
// of two Redis round trips.
func BenchmarkMiddleware(b *testing.B) {
	rdb := redistest.Best(b).Client(b)
	rs := newRouters(b, rdb)
	rs.serial(b, measure)

	ctx := context.Background()
	key, _ := lockcore.NewKey("productID", "42")
	b.Run("engine", func(b *testing.B) {
		measure(b, func() {
			ls, err := lifecycle.Serve(rs.l, nil).Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				b.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("2xPING", func(b *testing.B) {
		measure(b, func() {
			rdb.Ping(ctx)
			rdb.Ping(ctx)
		})
	})

	// A client that applies context deadlines (ContextTimeoutEnabled): the
	// engine's calls then fly in the caller's goroutine.
	opt := *rdb.Options()
	opt.ContextTimeoutEnabled = true
	dl := redis.NewClient(&opt)
	b.Cleanup(func() { dl.Close() })
	dls := newRouters(b, dl)
	req := httptest.NewRequest("POST", "/products/42/buy", nil)
	w := &discard{h: http.Header{}}
	b.Run("locked-With-ctxdeadline", func(b *testing.B) {
		measure(b, func() { dls.with.ServeHTTP(w, req) })
	})
	b.Run("engine-ctxdeadline", func(b *testing.B) {
		measure(b, func() {
			ls, err := lifecycle.Serve(dls.l, nil).Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				b.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkMiddlewareParallel runs the same requests from 16 goroutines per
// CPU, each on its own key. With the process busy, its CPU time per request
// is the work done rather than the spinning of an idle runtime waiting on
// the network, so cpu-ns/op of locked minus 2xPING is the middleware's own
// CPU cost.
func BenchmarkMiddlewareParallel(b *testing.B) {
	rdb := redistest.Best(b).Client(b)
	rs := newRouters(b, rdb)
	parallel := func(b *testing.B, fn func(req *http.Request, w http.ResponseWriter)) {
		var next atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(16)
		start := cpuTime()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			req := httptest.NewRequest("POST", fmt.Sprintf("/products/%d/buy", next.Add(1)), nil)
			w := &discard{h: http.Header{}}
			for pb.Next() {
				fn(req, w)
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
	ctx := context.Background()
	b.Run("bare", func(b *testing.B) {
		parallel(b, func(req *http.Request, w http.ResponseWriter) { rs.bare.ServeHTTP(w, req) })
	})
	b.Run("locked-With", func(b *testing.B) {
		parallel(b, func(req *http.Request, w http.ResponseWriter) { rs.with.ServeHTTP(w, req) })
	})
	b.Run("2xPING", func(b *testing.B) {
		parallel(b, func(*http.Request, http.ResponseWriter) {
			rdb.Ping(ctx)
			rdb.Ping(ctx)
		})
	})
}

// BenchmarkMiddlewareCPU is BenchmarkMiddleware with Redis answering
// instantly (see redistest.Instant): locked minus bare is the CPU the
// middleware adds to a request beside its two round trips.
func BenchmarkMiddlewareCPU(b *testing.B) {
	rdb := redistest.InstantClient(b)
	newRouters(b, rdb).serial(b, loop)
	ctx := context.Background()
	b.Run("2xPING", func(b *testing.B) {
		loop(b, func() {
			rdb.Ping(ctx)
			rdb.Ping(ctx)
		})
	})
}

// BenchmarkSoldOut compares a request for a sold-out product answered by
// its closed gate (lock.SoldOut: the middleware refuses it from memory,
// 410, without the handler or Redis) with the same chi route unlocked,
// whose handler answers 410 itself: the floor. redis-cmds/op counts the
// commands the gated requests sent (0).
func BenchmarkSoldOut(b *testing.B) {
	rdb := redistest.Best(b).Client(b)
	var cmds atomic.Int64
	rdb.AddHook(&countCmds{n: &cmds})
	l, err := redisengine.New(rdb, redisengine.Options{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	k, _ := lockcore.NewKey("productID", "42")
	if err := l.CloseGate(context.Background(), k, 0); err != nil {
		b.Fatal(err)
	}
	gone := func(w http.ResponseWriter, r *http.Request) { http.Error(w, "sold out", http.StatusGone) }
	bare := chi.NewRouter()
	bare.Post("/products/{productID}/buy", gone)
	gated := chi.NewRouter()
	gated.With(middleware.Lock(lifecycle.Serve(l, nil), middleware.Config{Key: keyfunc.Param("productID")})).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		b.Error("the handler ran for a sold-out product")
	})
	segmented := chi.NewRouter()
	segmented.With(middleware.Lock(lifecycle.Serve(l, nil), middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Segments: 8}})).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		b.Error("the handler ran for a sold-out product")
	})
	req := httptest.NewRequest("POST", "/products/42/buy", nil)
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"unlocked-410", bare}, {"gate-410", gated}, {"segments-gate-410", segmented}} {
		b.Run(bc.name, func(b *testing.B) {
			w := &discard{h: http.Header{}}
			cmds.Store(0)
			measure(b, func() { bc.h.ServeHTTP(w, req) })
			b.ReportMetric(float64(cmds.Load())/float64(b.N), "redis-cmds/op")
		})
	}
}

// countCmds counts the commands a client sends.
type countCmds struct{ n *atomic.Int64 }

func (h *countCmds) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countCmds) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countCmds) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}
