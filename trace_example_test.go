package lock_test

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/routelock/lock"
)

// Each hold and each waiter that the admin page and the routelock command
// show carries the trace id of its request: here the OpenTelemetry span's
// of the request's context (an otelhttp handler or otelchi puts it there).
func ExampleTrace() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker := lock.New(rdb, lock.Trace(func(ctx context.Context) string {
		if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
			return sc.TraceID().String()
		}
		return ""
	}))
	defer locker.Close()

	r := chi.NewRouter()
	r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {})
}
