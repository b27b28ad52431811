package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestOnlyDocumentedPaths: the handler serves its documented routes
// relative to where it is mounted, and nothing else: a release posted to
// /admin/locks/locks/productID:42/release, under a handler mounted at
// /admin, answers 404 and releases nothing.
func TestOnlyDocumentedPaths(t *testing.T) {
	e, key, ls := heldProduct(t)
	h := admin.Handler(e, admin.Config{})
	mux := http.NewServeMux()
	mux.Handle("/ops/admin/", http.StripPrefix("/ops/admin", h))
	chiSrv, stripSrv := mount(t, h), httptest.NewServer(mux)
	defer stripSrv.Close()
	reason := []string{"Content-Type", jsonCT}
	for _, c := range []struct {
		srv          *httptest.Server
		method, path string
	}{
		{chiSrv, "POST", "/admin/locks/locks/productID:42/release"},
		{chiSrv, "POST", "/admin/admin/locks/productID:42/release"},
		{chiSrv, "POST", "/admin/locks/productID:42/release/x"},
		{chiSrv, "GET", "/admin/locks/locks/productID:42"},
		{chiSrv, "GET", "/admin/locks/locks"},
		{chiSrv, "GET", "/admin/other"},
		{chiSrv, "GET", "/admin/locks/"},
		{stripSrv, "POST", "/ops/admin/locks/locks/productID:42/release"},
		{stripSrv, "GET", "/ops/admin/x/locks"},
	} {
		r := do(t, c.srv, c.method, c.path, `{"reason":"not here"}`, reason...)
		if r.code != http.StatusNotFound {
			t.Errorf("%s %s: %d %s, want 404", c.method, c.path, r.code, r.body)
		}
	}
	if err := ls.Err(); err != nil {
		t.Fatalf("the hold was lost: %v", err)
	}
	in, err := e.Inspect(t.Context(), key)
	if err != nil || len(in.Holders) != 1 || in.Fence != ls.Fence() || len(in.Audit) != 0 {
		t.Fatalf("after the 404s: %+v, %v; want held with fence %d and no audit record", in, err, ls.Fence())
	}
	// The documented path releases.
	if r := do(t, chiSrv, "POST", "/admin/locks/productID:42/release", `{"reason":"here"}`, reason...); r.code != http.StatusOK {
		t.Fatalf("POST /admin/locks/productID:42/release: %d %s", r.code, r.body)
	}
}

// TestMemoryOrigins: the in-memory engine names its holders and waiters
// as the Redis engine does: the instance name, the route and the trace id
// of each, which the handler shows.
func TestMemoryOrigins(t *testing.T) {
	e := &locktest.Engine{Name: "pod-a"}
	key, err := lockcore.NewKey("productID", "42")
	if err != nil {
		t.Fatal(err)
	}
	const route = "/products/{productID}/buy"
	ls, err := lifecycle.Serve(e, nil).Acquire(t.Context(), key, lifecycle.Policy{Route: route, Trace: "4bf92f3577b34da6a3ce929d0e0e4736"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	waited := make(chan error, 1)
	go func() {
		_, err := lifecycle.Serve(e, nil).Acquire(ctx, key, lifecycle.Policy{Wait: time.Minute, Route: "/shop.Inventory/Reserve", Trace: "0af7651916cd43dd8448eb211c80319c"})
		waited <- err
	}()
	defer func() {
		cancel()
		<-waited
		_ = ls.Release(context.Background())
	}()
	if err := e.Await(t.Context(), func() bool {
		in, _ := e.Inspect(t.Context(), key)
		return len(in.Waiters) == 1
	}); err != nil {
		t.Fatal(err)
	}
	srv := mount(t, admin.Handler(e, admin.Config{}))
	r := do(t, srv, "GET", "/admin/locks/productID:42", "")
	var l operate.Lock
	if err := json.Unmarshal([]byte(r.body), &l); err != nil || len(l.Holders) != 1 || len(l.Waiters) != 1 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	if h := l.Holders[0]; len(h.Names) != 1 || h.Names[0] != "pod-a" || h.Route != route || h.Trace != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("holder %+v", h)
	}
	if w := l.Waiters[0]; w.Name != "pod-a" || w.Route != "/shop.Inventory/Reserve" || w.Trace != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("waiter %+v", w)
	}
}

// TestMountForms: under every way of mounting that the package doc names
// (chi's Mount, a chi "/x/*" pattern under Route or after CleanPath, an
// http.ServeMux pattern ending in '/', with or without http.StripPrefix,
// a ServeMux mounted in chi) the documented routes answer, a release
// posted to its documented path revokes the hold, and a path the doc does
// not name answers 404 and releases nothing, even when the mount point's
// own name is also one of the handler's words.
func TestMountForms(t *testing.T) {
	reason := []string{"Content-Type", jsonCT}
	for _, c := range []struct {
		name  string
		serve func(h http.Handler) http.Handler
		base  string // where the documented routes start
		wrong string // a release posted to a path the doc does not name
	}{
		{"chi Mount", func(h http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Mount("/admin", h)
			return r
		}, "/admin", "/admin/admin/locks/productID:42/release"},
		{"chi Route and a wildcard", func(h http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/ops", func(r chi.Router) { r.Handle("/admin/*", h) })
			return r
		}, "/ops/admin", "/ops/admin/locks/locks/productID:42/release"},
		{"chi CleanPath and a wildcard", func(h http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(chimw.CleanPath)
			r.Handle("/admin/*", h)
			return r
		}, "/admin", "/admin/x/locks/productID:42/release"},
		{"ServeMux", func(h http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("/admin/", h)
			return mux
		}, "/admin", "/admin/admin/locks/productID:42/release"},
		{"ServeMux and StripPrefix named like a route", func(h http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("/locks/", http.StripPrefix("/locks", h))
			return mux
		}, "/locks", "/locks/x/locks/productID:42/release"},
		{"ServeMux and StripPrefix, the mount point twice", func(h http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("/admin/", http.StripPrefix("/admin", h))
			return mux
		}, "/admin", "/admin/admin/locks/productID:42/release"},
		{"ServeMux in chi", func(h http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("/admin/", h)
			r := chi.NewRouter()
			r.Mount("/", mux)
			return r
		}, "/admin", "/admin/locks/locks/productID:42/release"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _, ls := heldProduct(t)
			srv := httptest.NewServer(c.serve(admin.Handler(e, admin.Config{})))
			defer srv.Close()
			pages := []string{c.base + "/locks", c.base + "/locks/productID:42", c.base + "/gates"}
			if !strings.Contains(c.name, "CleanPath") { // which sends /admin/ to /admin, no route of chi's
				pages = append(pages, c.base+"/")
			}
			for _, p := range pages {
				if r := do(t, srv, "GET", p, ""); r.code != http.StatusOK {
					t.Errorf("GET %s: %d %s, want 200", p, r.code, r.body)
				}
			}
			if r := do(t, srv, "POST", c.wrong, `{"reason":"not here"}`, reason...); r.code != http.StatusNotFound {
				t.Errorf("POST %s: %d %s, want 404", c.wrong, r.code, r.body)
			}
			if err := ls.Err(); err != nil {
				t.Fatalf("a release posted to %s revoked the hold: %v", c.wrong, err)
			}
			p := c.base + "/locks/productID:42/release"
			if r := do(t, srv, "POST", p, `{"reason":"here"}`, reason...); r.code != http.StatusOK {
				t.Fatalf("POST %s: %d %s, want 200", p, r.code, r.body)
			}
			if err := ls.Err(); !errors.Is(err, lockcore.ErrRevoked) {
				t.Fatalf("after POST %s the hold says %v, want ErrRevoked", p, err)
			}
		})
	}
}

// heldProduct returns an in-memory engine on which productID:42 is held,
// the key, and the hold's lease, released when the test ends.
func heldProduct(t *testing.T) (*locktest.Engine, lockcore.Key, *lifecycle.Lease) {
	t.Helper()
	e := new(locktest.Engine)
	key, err := lockcore.NewKey("productID", "42")
	if err != nil {
		t.Fatal(err)
	}
	ls, err := lifecycle.Serve(e, nil).Acquire(t.Context(), key, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ls.Release(context.Background()) })
	return e, key, ls
}
