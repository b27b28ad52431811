package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/middleware"
)

// routeEngine is the fake engine as one that records routes (a method
// RecordsRoute reporting true, see middleware.Lock), or not; it is not an
// Operator, which the middleware gives routes to as well.
type routeEngine struct {
	f       *fakeEngine
	records bool
}

func (e *routeEngine) Acquire(ctx context.Context, key lockcore.Key, p lifecycle.Policy) (*lifecycle.Lease, error) {
	return e.f.Acquire(ctx, key, p)
}

func (e *routeEngine) Promises() lockcore.Promises { return e.f.Promises() }

func (e *routeEngine) RecordsRoute() bool { return e.records }

// acquireOnly is the fake engine with Acquire alone: no RecordsRoute, not
// an Operator.
type acquireOnly struct{ f *fakeEngine }

func (e acquireOnly) Acquire(ctx context.Context, key lockcore.Key, p lifecycle.Policy) (*lifecycle.Lease, error) {
	return e.f.Acquire(ctx, key, p)
}

func (e acquireOnly) Promises() lockcore.Promises { return e.f.Promises() }

// TestPolicyRoute: an engine that records routes gets the template of each
// request's route in Policy.Route, wherever the middleware sits: r.With,
// a router's r.Use (before the router has matched the route), the r.Use
// of a mounted router, r.Group, and around an http.ServeMux route, whether
// the key function matched the route itself (Param in a router's r.Use)
// or the middleware has to (Header); so does an Operator, which shows it
// to operators; an engine that does neither, or says it does not record
// routes, gets "".
func TestPolicyRoute(t *testing.T) {
	handler := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }
	for _, tc := range []struct {
		name, path, want string
		router           func(mw func(http.Handler) http.Handler) http.Handler
	}{
		{"With", "/products/42/buy", "/products/{productID}/buy", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.With(mw).Post("/products/{productID}/buy", handler)
			return r
		}},
		{"Use", "/products/42/buy", "/products/{productID}/buy", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(mw)
			r.Post("/products/{productID}/buy", handler)
			r.Post("/health", handler)
			return r
		}},
		{"Route", "/shop/products/42/buy", "/shop/products/{productID}/buy", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/shop", func(r chi.Router) {
				r.Use(mw)
				r.Post("/products/{productID}/buy", handler)
			})
			return r
		}},
		{"Group", "/shop/products/42/buy", "/shop/products/{productID}/buy", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/shop", func(r chi.Router) {
				r.Group(func(r chi.Router) {
					r.Use(mw)
					r.Post("/products/{productID}/buy", handler)
				})
			})
			return r
		}},
		{"catch-all", "/files/42/a/b", "/files/{productID}/*", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.With(mw).Post("/files/{productID}/*", handler)
			return r
		}},
		{"ServeMux", "/products/42/buy", "POST /products/{productID}/buy", func(mw func(http.Handler) http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /products/{productID}/buy", mw(http.HandlerFunc(handler)))
			return mux
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := []keyfunc.Func{
				keyfunc.Param("productID"),
				keyfunc.Header("X-User-ID"),
				keyfunc.Join(keyfunc.Header("X-User-ID"), keyfunc.Param("productID")),
			}
			for i := range 2 * len(keys) {
				key, records := keys[i/2], i%2 == 0
				e := &routeEngine{f: newFake(), records: records}
				h := tc.router(middleware.Lock(e, middleware.Config{Key: key}))
				w := httptest.NewRecorder()
				req := httptest.NewRequest("POST", tc.path, nil)
				req.Header.Set("X-User-ID", "u7")
				h.ServeHTTP(w, req)
				if w.Code != http.StatusNoContent {
					t.Fatalf("status %d: %s", w.Code, w.Body)
				}
				calls := e.f.Calls()
				if len(calls) != 1 {
					t.Fatalf("%d acquisitions, want 1", len(calls))
				}
				want := tc.want
				if !records {
					want = ""
				}
				if got := calls[0].Policy.Route; got != want {
					t.Fatalf("key %v, RecordsRoute %v: Route %q, want %q", key, records, got, want)
				}
			}
		})
	}
	// An engine with no RecordsRoute method at all, and one that is an
	// Operator.
	for _, op := range []bool{false, true} {
		f := newFake()
		var e lifecycle.Locker = acquireOnly{f}
		want := ""
		if op {
			e, want = f, "/products/{productID}/buy"
		}
		r := chi.NewRouter()
		r.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID")})).Post("/products/{productID}/buy", handler)
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/products/42/buy", nil))
		if calls := f.Calls(); len(calls) != 1 || calls[0].Policy.Route != want {
			t.Fatalf("Operator %v: calls %+v, want one with Route %q", op, calls, want)
		}
	}
}
