package lockotel_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockotel"
)

// Telemetry for one Locker: its locks' spans and metrics go to the
// program's providers, here an SDK tracer that keeps its spans in memory
// and a meter read by hand. With a zero Config, lockotel uses the global
// providers.
func Example() {
	mr, err := miniredis.Run() // any Redis; embedded here
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	tel := lockotel.New(lockotel.Config{TracerProvider: tp, MeterProvider: mp})
	locker := lock.New(rdb, lock.Observe(tel))
	defer locker.Close()

	r := chi.NewRouter()
	r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "bought")
	})
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/products/42/buy", nil))

	for _, s := range spans.Ended() {
		if s.Name() == "lock.acquire" {
			for _, kv := range s.Attributes() {
				switch kv.Key {
				case "lock.resource", "lock.route", "lock.outcome":
					fmt.Println(kv.Key, "=", kv.Value.String())
				}
			}
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "routelock.acquire.duration" {
			fmt.Println(m.Name, "count", h.DataPoints[0].Count)
		}
	}
	// Output:
	// lock.resource = productID
	// lock.route = /products/{productID}/buy
	// lock.outcome = acquired
	// routelock.acquire.duration count 1
}
