// Package chiroute matches the chi route a request is for ahead of the
// router, as a middleware in a router's r.Use must: keyfunc.Param reads a
// parameter of the route there, and the HTTP middleware its template.
//
// The path it matches is the one the router will route on: after the
// rewrites of chi's own path-rewriting middleware (StripSlashes, CleanPath,
// URLFormat) in the router's stack, whether they run before or after the
// caller. Other middleware that rewrites the path must run before it.
package chiroute

import (
	"errors"
	"net/http"
	"path"
	"reflect"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
)

// ErrNoRoute means that no route of the router matches the request's path,
// for any method: the router will answer 404, unless middleware that
// rewrites the path runs after the lock. A router-wide lock answers what
// the router would, without running the rest of the chain.
var ErrNoRoute = errors.New("keyfunc: no route of the router matches the path")

// ctxs recycles the chi contexts routes are matched into.
var ctxs = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// Find matches the route of r from the top of rctx's router (rctx.Routes,
// which must be set), with the method and path the router will use. It
// returns the matched pattern, "" when no route matches (the router
// answers 404 or 405), the context matched into, with the route's
// parameters, and whether their values are still percent-encoded (the
// router routes on r.URL.RawPath). Give the context back with Release once
// done with it.
func Find(r *http.Request, rctx *chi.Context) (string, *chi.Context, bool) {
	path, raw := Path(r, rctx)
	method := rctx.RouteMethod
	if method == "" {
		method = r.Method
	}
	t := ctxs.Get().(*chi.Context)
	t.Reset()
	return rctx.Routes.Find(t, method, path), t, raw
}

// Release gives back a context Find returned.
func Release(t *chi.Context) { ctxs.Put(t) }

// methods are those AnyMethod tries: chi's own.
var methods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace,
}

// AnyMethod reports whether a route of rctx.Routes matches the path of r
// with any of the standard methods: when Find matched none for r's own
// method, whether the router will answer 405 rather than 404.
func AnyMethod(r *http.Request, rctx *chi.Context) bool {
	path, _ := Path(r, rctx)
	t := ctxs.Get().(*chi.Context)
	defer ctxs.Put(t)
	for _, m := range methods {
		t.Reset()
		if rctx.Routes.Match(t, m, path) {
			return true
		}
	}
	return false
}

// Raw reports whether the router routed r on its still percent-encoded
// path (r.URL.RawPath), so that the values of chi's URL parameters are
// encoded too. rctx.Routes must be set.
func Raw(r *http.Request, rctx *chi.Context) bool {
	if r.URL.RawPath == "" {
		return false
	}
	s := routing{}
	for _, k := range rewriters(rctx.Routes) {
		s = s.apply(k, r)
	}
	_, raw := s.path(r)
	return raw
}

// Path returns the path the router rctx.Routes routes r on, and whether it
// is r.URL.RawPath's (still percent-encoded). In a router's own r.Use it
// is the path after the rewrites of chi's path-rewriting middleware in the
// router's stack, those that ran before the caller and those still to
// come; in a router mounted below it, the path all of them made.
func Path(r *http.Request, rctx *chi.Context) (string, bool) {
	ks := rewriters(rctx.Routes)
	top := len(rctx.RoutePatterns) == 0
	if len(ks) == 0 {
		var s routing
		if top && rctx.RoutePath != "" {
			// Set by middleware before the caller: chi routes on it.
			s = routing{set: true, p: rctx.RoutePath, raw: r.URL.RawPath != ""}
		}
		return s.path(r)
	}
	s := routing{}
	if top {
		// The rewriters before the caller have run: find the state they
		// left, and apply the rest. Each rewriter is a function of the
		// state, so from the first state that equals what the caller
		// sees, the rest make what the router will see.
		seen := routing{set: rctx.RoutePath != "", p: rctx.RoutePath,
			formatted: r.Context().Value(chimw.URLFormatCtxKey) != nil}
		from := -1
		for i := 0; i <= len(ks); i++ {
			if s.same(seen) {
				from = i
				break
			}
			if i < len(ks) {
				s = s.apply(ks[i], r)
			}
		}
		if from < 0 {
			// Middleware we do not know rewrote the path before the
			// caller: start from it, and apply what has not run yet.
			from = 0
			s = seen
			s.raw = r.URL.RawPath != ""
		}
		ks = ks[from:]
	}
	for _, k := range ks {
		s = s.apply(k, r)
	}
	return s.path(r)
}

// routing is the state of chi's routing path that its path-rewriting
// middleware reads and writes: rctx.RoutePath (p, when set), whether it
// came from r.URL.RawPath, and whether URLFormat has run.
type routing struct {
	p         string
	set       bool
	raw       bool
	formatted bool
}

func (s routing) same(o routing) bool {
	return s.set == o.set && s.p == o.p && s.formatted == o.formatted
}

// path returns the path chi's router routes on in state s (Mux.routeHTTP).
func (s routing) path(r *http.Request) (string, bool) {
	if s.set {
		return s.p, s.raw
	}
	if r.URL.RawPath != "" {
		return r.URL.RawPath, true
	}
	if r.URL.Path != "" {
		return r.URL.Path, false
	}
	return "/", false
}

// input returns the path StripSlashes and URLFormat read: the routing path
// when set, and else r.URL.Path.
func (s routing) input(r *http.Request) (string, bool) {
	if s.set {
		return s.p, s.raw
	}
	return r.URL.Path, false
}

// apply returns the state after rewriter k ran in state s, as chi v5's
// middleware/strip.go, clean_path.go and url_format.go rewrite it.
func (s routing) apply(k rewriter, r *http.Request) routing {
	switch k {
	case stripSlashes:
		p, raw := s.input(r)
		if len(p) > 1 && p[len(p)-1] == '/' {
			s.p, s.set, s.raw = p[:len(p)-1], true, raw
		}
	case cleanPath:
		if !s.set {
			p, raw := r.URL.Path, false
			if r.URL.RawPath != "" {
				p, raw = r.URL.RawPath, true
			}
			s.p, s.set, s.raw = path.Clean(p), true, raw
		}
	case urlFormat:
		p, raw := s.input(r)
		s.formatted = true
		if strings.Index(p, ".") > 0 {
			if base := strings.LastIndex(p, "/"); base >= 0 {
				if idx := strings.LastIndex(p[base:], "."); idx > 0 {
					s.p, s.set, s.raw = p[:idx+base], true, raw
				}
			}
		}
	}
	return s
}

// rewriter is one of chi's path-rewriting middlewares.
type rewriter uint8

const (
	stripSlashes rewriter = iota + 1
	cleanPath
	urlFormat
)

// The code of chi's rewriters, by which a router's stack names them.
var (
	stripPC  = reflect.ValueOf(chimw.StripSlashes).Pointer()
	cleanPC  = reflect.ValueOf(chimw.CleanPath).Pointer()
	formatPC = reflect.ValueOf(chimw.URLFormat).Pointer()
)

// stacks caches the rewriters of each *chi.Mux's stack, which chi does not
// let change once the router serves.
var stacks sync.Map // *chi.Mux → []rewriter

// rewriters returns chi's path-rewriting middlewares in rs's stack, in
// order.
func rewriters(rs chi.Routes) []rewriter {
	mx, ok := rs.(*chi.Mux)
	if ok {
		if v, ok := stacks.Load(mx); ok {
			return v.([]rewriter)
		}
	}
	var ks []rewriter
	for _, mw := range rs.Middlewares() {
		switch reflect.ValueOf(mw).Pointer() {
		case stripPC:
			ks = append(ks, stripSlashes)
		case cleanPC:
			ks = append(ks, cleanPath)
		case formatPC:
			ks = append(ks, urlFormat)
		}
	}
	if ok {
		stacks.Store(mx, ks)
	}
	return ks
}

// Names reports whether a route of a router names one parameter, caching
// the answer per router once it is yes: routes can be added to a router
// after it served, never removed.
type Names struct {
	name string
	yes  sync.Map // *chi.Mux → struct{}
}

// NewNames returns the Names of parameter name.
func NewNames(name string) *Names { return &Names{name: name} }

// In reports whether a route of rs, or of a router mounted on it, has the
// parameter in its pattern ({name} or {name:regexp}).
func (n *Names) In(rs chi.Routes) bool {
	mx, ok := rs.(*chi.Mux)
	if ok {
		if _, ok := n.yes.Load(mx); ok {
			return true
		}
	}
	plain, re := "{"+n.name+"}", "{"+n.name+":"
	found := errors.New("found")
	err := chi.Walk(rs, func(_ string, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.Contains(route, plain) || strings.Contains(route, re) {
			return found
		}
		return nil
	})
	if err != found {
		return false
	}
	if ok {
		n.yes.Store(mx, struct{}{})
	}
	return true
}
