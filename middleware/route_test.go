package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/middleware"
)

// plainEngine is the fake engine as one that is not an Operator, which
// the middleware gives routes to: it records the Route of each Request.
type plainEngine struct {
	f      *fakeEngine
	mu     sync.Mutex
	routes []string
}

func (e *plainEngine) Take(ctx context.Context, r lockcore.Request) (lockcore.Hold, error) {
	e.mu.Lock()
	e.routes = append(e.routes, r.Route)
	e.mu.Unlock()
	return e.f.Take(ctx, r)
}

func (e *plainEngine) Promises() lockcore.Promises { return e.f.Promises() }

func (e *plainEngine) Close() error { return nil }

func (e *plainEngine) taken() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.routes...)
}

// TestPolicyRoute: an engine that records routes gets the template of each
// request's route in Policy.Route, wherever the middleware sits: r.With,
// a router's r.Use (before the router has matched the route), the r.Use
// of a mounted router, r.Group, and around an http.ServeMux route, whether
// the key function matched the route itself (Param in a router's r.Use)
// or the middleware has to (Header); so does an Operator, which shows it
// to operators; an engine that is not one, under a Locker that does not
// record routes (lifecycle.RecordRoutes), gets "".
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
				e := &plainEngine{f: newFake()}
				l := lifecycle.Serve(e, nil)
				if records {
					lifecycle.RecordRoutes(l)
				}
				h := tc.router(middleware.Lock(l, middleware.Config{Key: key}))
				w := httptest.NewRecorder()
				req := httptest.NewRequest("POST", tc.path, nil)
				req.Header.Set("X-User-ID", "u7")
				h.ServeHTTP(w, req)
				if w.Code != http.StatusNoContent {
					t.Fatalf("status %d: %s", w.Code, w.Body)
				}
				routes := e.taken()
				if len(routes) != 1 {
					t.Fatalf("%d acquisitions, want 1", len(routes))
				}
				want := tc.want
				if !records {
					want = ""
				}
				if got := routes[0]; got != want {
					t.Fatalf("key %v, RecordsRoute %v: Route %q, want %q", key, records, got, want)
				}
			}
		})
	}
	// An engine that is an Operator, under a Locker that does not record
	// routes otherwise.
	f := newFake()
	r := chi.NewRouter()
	r.With(middleware.Lock(f, middleware.Config{Key: keyfunc.Param("productID")})).Post("/products/{productID}/buy", handler)
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/products/42/buy", nil))
	if calls := f.Calls(); len(calls) != 1 || calls[0].Policy.Route != "/products/{productID}/buy" {
		t.Fatalf("Operator: calls %+v, want one with Route %q", calls, "/products/{productID}/buy")
	}
}
