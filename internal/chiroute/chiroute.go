// Package chiroute matches the chi route a request is for ahead of the
// router, as a middleware in a router's r.Use must: keyfunc.Param reads a
// parameter of the route there, and the HTTP middleware its template.
package chiroute

import (
	"net/http"
	"sync"

	"github.com/go-chi/chi/v5"
)

// ctxs recycles the chi contexts routes are matched into.
var ctxs = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// Find matches the route of r from the top of rctx's router (rctx.Routes,
// which must be set), with the method and path the router will use. It
// returns the matched pattern, "" when no route matches (the router
// answers 404 or 405), and the context matched into, with the route's
// parameters; give it back with Release once done with it.
func Find(r *http.Request, rctx *chi.Context) (string, *chi.Context) {
	path := ""
	if len(rctx.RoutePatterns) == 0 {
		path = rctx.RoutePath // set by path-rewriting middleware before routing
	}
	if path == "" {
		path = r.URL.RawPath
	}
	if path == "" {
		path = r.URL.Path
	}
	if path == "" {
		path = "/"
	}
	method := rctx.RouteMethod
	if method == "" {
		method = r.Method
	}
	t := ctxs.Get().(*chi.Context)
	t.Reset()
	return rctx.Routes.Find(t, method, path), t
}

// Release gives back a context Find returned.
func Release(t *chi.Context) { ctxs.Put(t) }
