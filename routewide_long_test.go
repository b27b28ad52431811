//go:build long

package lock_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
)

// TestRouterWideLockAfterRewrites: a router-wide lock finds the route that
// the router serves after chi's path-rewriting middleware, on either side
// of the lock: 8 concurrent POST /products/42/buy/ (StripSlashes),
// //products//42/buy (CleanPath) and /products/42/buy.json (URLFormat)
// run one at a time, each with a fencing token. They all ran at once,
// unlocked, when the rewriter came after the lock.
func TestRouterWideLockAfterRewrites(t *testing.T) {
	runUserClients(t, func(t *testing.T, b *redistest.Backend, mk func() redis.UniversalClient) {
		for _, c := range []struct {
			name string
			mw   func(http.Handler) http.Handler
			path string
		}{
			{"StripSlashes", chimw.StripSlashes, "/products/42/buy/"},
			{"CleanPath", chimw.CleanPath, "//products//42/buy"},
			{"URLFormat", chimw.URLFormat, "/products/42/buy.json"},
		} {
			for _, after := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/after=%v", c.name, after), func(t *testing.T) {
					// Each case waits out meetSecond's window once; they
					// run side by side, each on a prefix of its own.
					t.Parallel()
					var in inside
					a := newAppOn(t, mk(), redistest.Prefix(t), func(a *app) http.Handler {
						r := chi.NewRouter()
						if !after {
							r.Use(c.mw)
						}
						r.Use(a.locker.ByParam("productID", lock.Wait(30e9)))
						if after {
							r.Use(c.mw)
						}
						r.Get("/health", func(http.ResponseWriter, *http.Request) {})
						r.Post("/products/{productID}/buy", in.handler(meetSecond()))
						return r
					})
					const n = 8
					got := concurrently(t, httpClient(t, nil), n, "POST", a.srv.URL+c.path)
					if got[http.StatusOK] != n || in.ran.Load() != n {
						t.Fatalf("statuses %v, handler ran %d times; want %d × 200", got, in.ran.Load(), n)
					}
					if m := in.most.Load(); m != 1 {
						t.Fatalf("%d handlers inside at once, want 1", m)
					}
					if u := in.unfenced.Load(); u != 0 {
						t.Fatalf("%d handlers ran without a fencing token", u)
					}
				})
			}
		}
	})
}
