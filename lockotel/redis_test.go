package lockotel_test

// Telemetry of the Redis engine of lock.New when Redis cannot be reached.

import (
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"

	lock "github.com/routelock/lock"
)

// closedAddr returns a loopback address that nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRedisDown: with Redis unreachable (a client of go-redis's default
// options on an address nothing listens on), a request is answered 503
// without running its handler; its lock.acquire says unavailable with an
// error status, and the metric counts it.
func TestRedisDown(t *testing.T) {
	r := newRig(t)
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	locker := lock.New(rdb, lock.Observe(r.tel))
	t.Cleanup(func() { locker.Close() })
	var ran atomic.Bool
	router := chi.NewRouter()
	router.Use(r.traced)
	router.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, req *http.Request) { ran.Store(true) })
	srv := serve(t, router)
	if code, body := post(client(t, nil), bounded(t), srv.URL+"/products/42/buy"); code != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", code, body)
	}
	if ran.Load() {
		t.Fatal("the handler ran without its lock")
	}
	acq := r.only(t, "lock.acquire", r.wait(t))
	wantAttrs(t, "lock.acquire", acq.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": "/products/{productID}/buy", "lock.mode": "wait",
		"lock.outcome": "unavailable", "lock.wait": nil,
	})
	if st := acq.Status(); st.Code != codes.Error || st.Description != "unavailable" {
		t.Fatalf("status %+v, want Error unavailable", st)
	}
	m := r.collect(t)
	m.wantCount(t, "routelock.acquire.duration", 1, "lock.resource", "productID", "lock.route", "/products/{productID}/buy", "lock.outcome", "unavailable")
	m.wantSum(t, "routelock.held", 0, "lock.resource", "productID")
}
