package lock_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redisconf"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// inside counts the handlers running at once and the most there ever were.
type inside struct {
	now, most, ran atomic.Int32
	unfenced       atomic.Int32
}

// handler enters, meets a second entrant if one comes within the bound of
// meet (so that handlers without the lock overlap for sure), and leaves.
func (in *inside) handler(meet func()) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		in.ran.Add(1)
		n := in.now.Add(1)
		defer in.now.Add(-1)
		for m := in.most.Load(); n > m && !in.most.CompareAndSwap(m, n); m = in.most.Load() {
		}
		if _, ok := lock.FencingToken(r.Context()); !ok {
			in.unfenced.Add(1)
		}
		meet()
	}
}

// concurrently sends n requests at once and returns their statuses.
func concurrently(t *testing.T, hc *http.Client, n int, method, url string) map[int]int {
	t.Helper()
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, err := http.NewRequest(method, url, nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	close(start)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	return count
}

// TestRouterWideLockNoRoute: a path that matches no route of the router,
// for any method, is answered by the router's NotFound handler from the
// router-wide lock itself, without running the rest of the chain: a
// rewriter the lock does not know, after it, would otherwise turn it into
// a locked route served unlocked. The logger hears of it once, without the
// path. A route of another method still gets the router's 405.
func TestRouterWideLockNoRoute(t *testing.T) {
	b := redistest.Mini(t)
	var logged syncBuffer
	var in inside
	var rewrote atomic.Int32
	a := newApp(t, b, redistest.Prefix(t), func(a *app) http.Handler {
		r := chi.NewRouter()
		r.NotFound(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "custom not found", http.StatusNotFound) })
		r.Use(a.locker.ByParam("productID", lock.FailFast()))
		r.Use(func(next http.Handler) http.Handler { // rewrites /p/ID to /products/ID/buy
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if id, ok := strings.CutPrefix(r.URL.Path, "/p/"); ok {
					rewrote.Add(1)
					chi.RouteContext(r.Context()).RoutePath = "/products/" + id + "/buy"
				}
				next.ServeHTTP(w, r)
			})
		})
		r.Post("/products/{productID}/buy", in.handler(func() {}))
		return r
	}, lock.Logger(slog.New(slog.NewTextHandler(&logged, nil))))
	hc := httpClient(t, nil)
	for range 3 {
		res := do(t, hc, "POST", a.srv.URL+"/p/plugh-42", nil)
		if res.status != http.StatusNotFound || res.body != "custom not found\n" {
			t.Fatalf("a path no route matches: %d %q, want the router's 404", res.status, res.body)
		}
	}
	if n, r := in.ran.Load(), rewrote.Load(); n != 0 || r != 0 {
		t.Fatalf("the handler ran %d times, the rewriter %d: want neither", n, r)
	}
	if res := do(t, hc, "GET", a.srv.URL+"/products/42/buy", nil); res.status != http.StatusMethodNotAllowed {
		t.Fatalf("GET on a POST route: %d, want the router's 405", res.status)
	}
	if res := do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil); res.status != http.StatusOK {
		t.Fatalf("the route itself: %d %q", res.status, res.body)
	}
	log := logged.String()
	if n := strings.Count(log, "matches no route"); n != 1 {
		t.Fatalf("logged %d lines about a path matching no route, want 1: %s", n, log)
	}
	if strings.Contains(log, "plugh") {
		t.Fatalf("the log repeats the path: %s", log)
	}
}

// TestRouterWideMisspeltParam: a router-wide lock whose parameter no route
// of its router names (productId above /products/{productID}/buy) ran every
// route unlocked, 10 handlers inside at once, without a word. Every request
// through it now answers 500, no handler runs, and the logger is told once,
// naming the parameter and never a request's value.
func TestRouterWideMisspeltParam(t *testing.T) {
	runUserClients(t, func(t *testing.T, b *redistest.Backend, mk func() redis.UniversalClient) {
		var logged syncBuffer
		var in inside
		a := newAppOn(t, mk(), redistest.Prefix(t), func(a *app) http.Handler {
			r := chi.NewRouter()
			r.Use(a.locker.ByParam("productId"))
			r.Get("/health", in.handler(func() {}))
			r.Route("/shop", func(r chi.Router) {
				r.Post("/products/{productID}/buy", in.handler(meetSecond()))
			})
			return r
		}, lock.Logger(slog.New(slog.NewTextHandler(&logged, nil))))
		hc := httpClient(t, nil)
		got := concurrently(t, hc, 10, "POST", a.srv.URL+"/shop/products/xyzzy-42/buy")
		if got[http.StatusInternalServerError] != 10 {
			t.Fatalf("statuses %v, want 10 × 500", got)
		}
		if res := do(t, hc, "GET", a.srv.URL+"/health", nil); res.status != http.StatusInternalServerError {
			t.Fatalf("/health: %d, want 500", res.status)
		}
		if n := in.ran.Load(); n != 0 {
			t.Fatalf("handlers ran %d times", n)
		}
		log := logged.String()
		if n := strings.Count(log, "does not name its key"); n != 1 {
			t.Fatalf("logged %d lines, want 1: %s", n, log)
		}
		if !strings.Contains(log, "Param(productId)") || strings.Contains(log, "xyzzy") {
			t.Fatalf("the log should name Param(productId) and no request value: %s", log)
		}
	})
}

// TestOneResourceOneKey: while product 42 is held, every other spelling of
// it (percent-encoded digits, leading zeros, a sign) is the same lock: on
// a route lock and on a router-wide lock alike, fail-fast answers 409 and
// the handler does not run. A UUID held in lower case is the same lock in
// upper case.
func TestOneResourceOneKey(t *testing.T) {
	runUserClients(t, func(t *testing.T, b *redistest.Backend, mk func() redis.UniversalClient) {
		prefix := redistest.Prefix(t)
		var in inside
		routeLock := newAppOn(t, mk(), prefix, func(a *app) http.Handler {
			r := chi.NewRouter()
			r.With(a.locker.ByParam("productID", lock.FailFast())).Post("/products/{productID}/reserve", in.handler(func() {}))
			return r
		})
		routerWide := newAppOn(t, mk(), prefix, func(a *app) http.Handler {
			r := chi.NewRouter()
			r.Use(a.locker.ByParam("productID", lock.FailFast()))
			r.Post("/products/{productID}/reserve", in.handler(func() {}))
			return r
		})
		hc := httpClient(t, nil)
		const id = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
		for _, held := range []struct {
			value     string
			spellings []string
		}{
			{"42", []string{"%34%32", "042", "%2B42", "+42", "0%342", "-0%342"}},
			{id, []string{strings.ToUpper(id), "3F2504E0-4f89-11d3-9a0c-0305e82c3301", "%33f2504e0-4f89-11d3-9a0c-0305e82c3301"}},
		} {
			other := lock.NewRedis(mk(), redisengine.Options{Prefix: prefix})
			lease, err := other.Acquire(context.Background(), key(t, "productID", held.value), lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range []*app{routeLock, routerWide} {
				for _, s := range held.spellings {
					if s == "-0%342" {
						continue // -042 is another product: checked below
					}
					if res := do(t, hc, "POST", a.srv.URL+"/products/"+s+"/reserve", nil); res.status != http.StatusConflict {
						t.Errorf("%s while %s is held: %d %q, want 409", s, held.value, res.status, res.body)
					}
				}
			}
			if n := in.ran.Load(); n != 0 {
				t.Fatalf("a handler ran %d times beside the holder", n)
			}
			if held.value == "42" {
				if res := do(t, hc, "POST", routeLock.srv.URL+"/products/-0%342/reserve", nil); res.status != http.StatusOK {
					t.Errorf("-42 while 42 is held: %d %q, want 200 (another product)", res.status, res.body)
				}
				in.ran.Store(0)
			}
			if err := lease.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			other.Close()
		}
	})
}

// userClients are the go-redis configurations users run: its defaults, as
// the one-line redis.NewClient builds it, and with ContextTimeoutEnabled,
// as the README's quick start does.
var userClients = []struct {
	name string
	ctx  bool // ContextTimeoutEnabled
}{{"defaults", false}, {"ctx", true}}

// runUserClients runs f once per deployment (redistest.Deployments) and
// user client configuration; mk makes a client of that configuration,
// closed when the test ends.
func runUserClients(t *testing.T, f func(t *testing.T, b *redistest.Backend, mk func() redis.UniversalClient)) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		for _, uc := range userClients {
			t.Run(uc.name, func(t *testing.T) {
				f(t, b, func() redis.UniversalClient {
					return b.UniversalWith(t, func(o *redisconf.Common) { *o.ContextTimeoutEnabled = uc.ctx })
				})
			})
		}
	})
}
