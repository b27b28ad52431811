package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// Check returns an error matching lockcore.ErrMisconfigured that names
// every lock of chi router r whose routes cannot name its key, so that a
// misspelt parameter stops the program at startup instead of answering 500
// to every request of its route (see keyfunc.Param):
//
//   - a lock of one route (r.With, r.Group, or r.Use inside r.Group) whose
//     pattern lacks a route parameter the key reads, for a method it locks;
//   - a lock before routing (a router's r.Use, or r.With before Mount)
//     none of whose routes has such a parameter.
//
// It finds the locks of Lock, of package lock's By and ByParam and of
// their Locker methods; nil when each has its parameters. It calls each
// middleware of r once to build a handler, as chi does when it builds a
// route, and serves no request. Call it at startup, after the routes are
// registered:
//
//	if err := middleware.Check(r); err != nil {
//		log.Fatal(err)
//	}
func Check(r chi.Routes) error {
	var errs []error
	check(r, "", &errs)
	return errors.Join(errs...)
}

// keyed is a lock middleware's handler: this package's, or the one of
// package lock's package-level By, which builds this package's per request.
type keyed interface {
	LockKey() (key keyfunc.Func, methods []string)
}

// locksOf returns the lock middlewares among mws, as keyed handlers.
func locksOf(mws []func(http.Handler) http.Handler) []keyed {
	var ks []keyed
	for _, mw := range mws {
		if k, ok := mw(http.NotFoundHandler()).(keyed); ok {
			ks = append(ks, k)
		}
	}
	return ks
}

// check adds to errs what is wrong with the locks of rs, whose routes'
// patterns start with prefix.
func check(rs chi.Routes, prefix string, errs *[]error) {
	for _, k := range locksOf(rs.Middlewares()) {
		checkWide(rs, prefix, k, errs)
	}
	for _, rt := range rs.Routes() {
		if rt.SubRoutes != nil {
			// A mounted router; r.With(...).Mount's middlewares run before
			// it routes, as a router's r.Use does.
			if ch, ok := rt.Handlers["*"].(*chi.ChainHandler); ok {
				for _, k := range locksOf(ch.Middlewares) {
					checkWide(rt.SubRoutes, prefix+rt.Pattern, k, errs)
				}
			}
			check(rt.SubRoutes, prefix+rt.Pattern, errs)
			continue
		}
		methods := make([]string, 0, len(rt.Handlers))
		for m := range rt.Handlers {
			methods = append(methods, m)
		}
		slices.Sort(methods)
		for _, m := range methods {
			ch, ok := rt.Handlers[m].(*chi.ChainHandler)
			if !ok || m == "*" {
				continue
			}
			pattern := clean(prefix + rt.Pattern)
			for _, k := range locksOf(ch.Middlewares) {
				key, only := k.LockKey()
				if only != nil && !slices.Contains(only, m) {
					continue
				}
				for _, p := range view.Params(key) {
					if !hasParam(pattern, p) {
						*errs = append(*errs, fmt.Errorf("%w: %s %s is locked on %v, but its pattern has no parameter {%s}",
							lockcore.ErrMisconfigured, m, pattern, key, p))
					}
				}
			}
		}
	}
}

// checkWide adds to errs each parameter of k's key that no route of rs
// (whose patterns start with prefix) has: a lock before routing serves
// the routes that have its parameters and passes the others unlocked, but
// one that no route can name refuses every request with 500.
func checkWide(rs chi.Routes, prefix string, k keyed, errs *[]error) {
	key, _ := k.LockKey()
	var patterns []string
	_ = chi.Walk(rs, func(_ string, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		patterns = append(patterns, clean(prefix+route))
		return nil
	})
	for _, p := range view.Params(key) {
		if !slices.ContainsFunc(patterns, func(pat string) bool { return hasParam(pat, p) }) {
			*errs = append(*errs, fmt.Errorf("%w: a router-wide lock under %q is locked on %v, but no route of its router has a parameter {%s}",
				lockcore.ErrMisconfigured, clean(prefix+"/"), key, p))
		}
	}
}

// hasParam reports whether chi pattern has parameter name ({name} or
// {name:regexp}; "*" is a wildcard route's rest of the path, /files/*).
func hasParam(pattern, name string) bool {
	if name == "*" {
		return strings.HasSuffix(pattern, "*")
	}
	return strings.Contains(pattern, "{"+name+"}") || strings.Contains(pattern, "{"+name+":")
}

// clean joins a mounted router's pattern with its routes' as chi.Walk does.
func clean(p string) string {
	p = strings.ReplaceAll(p, "/*/", "/")
	for strings.Contains(p, "//") {
		p = strings.ReplaceAll(p, "//", "/")
	}
	return p
}
