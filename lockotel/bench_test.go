package lockotel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/lockotel"
	"github.com/routelock/lock/middleware"
)

// discard is a ResponseWriter that costs nothing.
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

// BenchmarkTelemetryCPU is middleware's BenchmarkMiddlewareCPU (Redis
// answering instantly, redistest.Instant) with and without telemetry: a
// chi route locked in r.With on the Redis engine, off (no telemetry), on
// the global providers of a program that set none (telemetry configured
// but going nowhere), and on SDK providers that sample and record every
// span and aggregate every measurement (no exporter). on minus off is
// what telemetry adds to a request's CPU; cpu-ns/op counts the process's.
func BenchmarkTelemetryCPU(b *testing.B) {
	rdb := redistest.InstantClient(b)
	handler := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }
	router := func(b *testing.B, tel lifecycle.Observer) http.Handler {
		opt := redisengine.Options{Prefix: redistest.Prefix(b)}
		if tel != nil {
			opt.Events = tel.Events()
		}
		e, err := redisengine.New(rdb, opt)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close() })
		// A Locker either way, so that the difference is the telemetry's.
		var opts []lock.Option
		if tel != nil {
			opts = append(opts, lock.Observe(tel))
		}
		engine := lock.FromEngine(e, opts...)
		r := chi.NewRouter()
		r.With(middleware.Lock(engine, middleware.Config{Key: keyfunc.Param("productID")})).Post("/products/{productID}/buy", handler)
		return r
	}
	sdk := func(b *testing.B) lifecycle.Observer {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() {
			_ = tp.Shutdown(b.Context())
			_ = mp.Shutdown(b.Context())
		})
		return lockotel.New(lockotel.Config{TracerProvider: tp, MeterProvider: mp})
	}
	sdkMetrics := func(b *testing.B) lifecycle.Observer {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = mp.Shutdown(b.Context()) })
		return lockotel.New(lockotel.Config{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: mp})
	}
	for _, bc := range []struct {
		name string
		tel  func(b *testing.B) lifecycle.Observer
	}{
		{"off", func(*testing.B) lifecycle.Observer { return nil }},
		{"on-global", func(*testing.B) lifecycle.Observer { return lockotel.New(lockotel.Config{}) }},
		{"on-sdk-metrics", sdkMetrics},
		{"on-sdk", sdk},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := router(b, bc.tel(b))
			req := httptest.NewRequest("POST", "/products/42/buy", nil)
			w := &discard{h: http.Header{}}
			h.ServeHTTP(w, req) // warm: attribute sets made
			b.ReportAllocs()
			b.ResetTimer()
			start := cpuTime()
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkSDKSpans is the floor under on-sdk minus off in
// BenchmarkTelemetryCPU: what the OpenTelemetry SDK itself takes to start
// and end two sampled root spans (a request's lock.acquire and
// lock.release) with the attributes and the event lockotel gives them,
// with no lock and no request around them.
func BenchmarkSDKSpans(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { _ = tp.Shutdown(b.Context()) })
	tr := tp.Tracer("bench")
	ctx := context.Background()
	acquire := []attribute.KeyValue{
		attribute.String("lock.resource", "productID"), attribute.String("lock.route", "/products/{productID}/buy"),
		attribute.String("lock.mode", "wait"), attribute.String("lock.outcome", "acquired"),
		attribute.Float64("lock.wait", 0.0001), attribute.Bool("lock.reentered", false), attribute.Int64("lock.fence", 42),
	}
	release := []attribute.KeyValue{
		attribute.String("lock.resource", "productID"), attribute.String("lock.outcome", "released"), attribute.Float64("lock.held", 0.001),
	}
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		_, s := tr.Start(ctx, "lock.acquire")
		s.SetAttributes(acquire...)
		s.AddEvent("lock.granted")
		s.End()
		_, s = tr.Start(ctx, "lock.release")
		s.SetAttributes(release...)
		s.End()
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}
