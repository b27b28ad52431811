package keyfunc

import (
	"context"
	"errors"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/routelock/lock/internal/chiroute"
	"github.com/routelock/lock/lockcore"
)

// Param returns the key function of a route parameter: resource name and
// the value of {name} in the matched route, as in /products/{productID}/buy.
//
// With chi it works wherever the middleware sits. Middleware given to
// r.With, or inside r.Group, runs after routing and reads chi's URL
// parameters. Middleware given to r.Use runs before the router has matched a
// route; there Param matches the route itself (chi's Routes.Find, the same
// lookup the router is about to make) and reads the parameter from the
// result. Without chi it reads r.PathValue (Go 1.22 http.ServeMux patterns),
// which needs the middleware around the route's handler: around the whole
// ServeMux the request is not routed yet and Param fails with an error
// matching lockcore.ErrMisconfigured ("request not routed").
//
// In a router's r.Use, the path Param matches is the one the router will
// route on: after the rewrites of chi's StripSlashes, CleanPath and
// URLFormat in the router's stack, whether they come before or after the
// lock. Other middleware that rewrites the path must come before the lock.
// A path that no route of the router matches, for any method, fails with
// an error the middleware answers with the router's NotFound handler,
// without running the rest of the chain.
//
// The value is the one the handler acts on: chi hands a handler the
// segment still percent-encoded when the client encoded more than it had
// to (/products/%34%32), and Param decodes it (a segment that does not
// decode is invalid), so that it is the same key as
// /products/42. http.ServeMux's PathValue is decoded already.
//
// In a router's r.Use, a route whose pattern has no such parameter is not
// locked: Param returns ErrSkip. Where the middleware wraps one route
// (r.With, r.Group, a handler of a ServeMux), that route lacking the
// parameter is a configuration error ("the route has no such parameter",
// matching lockcore.ErrMisconfigured: 500 rather than a route run
// unlocked), and so is, in a router's r.Use, a router none of whose routes
// (mounted routers included) has the parameter: the name is misspelt. A
// route that has the parameter with an empty value fails with ErrMissing.
//
// Panics if name is empty or longer than 256 bytes.
func Param(name string) Func {
	checkName("Param", name)
	names := chiroute.NewNames(name)
	return one(source{
		name:      name,
		param:     name,
		desc:      "Param(" + name + ")",
		httpRoute: func(r *http.Request) (string, string, error) { return param(r, name, names) },
	})
}

var (
	errNotInRoute  error = &detail{sentinel: lockcore.ErrMisconfigured, msg: "the route has no such parameter"}
	errNoSuchParam error = &detail{sentinel: lockcore.ErrMisconfigured, msg: "no route of the router has such a parameter"}
	errNotRouted   error = &detail{sentinel: lockcore.ErrMisconfigured, msg: "request not routed", more: ": wrap the route's handler, not the ServeMux"}
	errNoRoute     error = &detail{sentinel: chiroute.ErrNoRoute, msg: "no route matches the path"}
	errEncoding          = invalid("not a valid percent-encoded path segment")
)

// param returns the value of route parameter name of r and, when it had to
// match r's route itself (the router has not yet), the route's template.
func param(r *http.Request, name string, names *chiroute.Names) (v, route string, err error) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		v, err = pathValue(r, name)
		return v, "", err
	}
	if v, ok := urlParam(rctx, name); ok {
		if rctx.Routes != nil && strings.IndexByte(v, '%') >= 0 && chiroute.Raw(r, rctx) {
			v, err = unescape(v)
		}
		return v, "", err
	}
	if rctx.Routes == nil {
		v, err = pathValue(r, name)
		return v, "", err
	}
	// Not among the parameters matched so far: either the route has no such
	// parameter, or the router has not matched the route yet (r.Use). Match
	// it from the top, as the router will.
	p, t, raw := chiroute.Find(r, rctx)
	defer chiroute.Release(t)
	if p != "" {
		if v, ok := urlParam(t, name); ok {
			if raw {
				v, err = unescape(v)
			}
			return v, p, err
		}
		if t.RoutePattern() == rctx.RoutePattern() {
			// The router had matched the route already: the middleware wraps
			// this route (r.With, r.Group), whose pattern lacks the parameter.
			return "", "", errNotInRoute
		}
	}
	// A router-wide lock, on a route without the parameter or on a path no
	// route matches. A router none of whose routes has the parameter can
	// only be a misspelt name: fail closed rather than lock nothing.
	if !names.In(rctx.Routes) {
		return "", "", errNoSuchParam
	}
	if p == "" && !chiroute.AnyMethod(r, rctx) {
		// Nothing matches, for any method: the router answers 404, unless
		// middleware after the lock rewrites the path into a locked route.
		return "", "", errNoRoute
	}
	return "", "", ErrSkip
}

// unescape decodes a chi URL parameter that the router took from the
// percent-encoded path (r.URL.RawPath): /products/%34%32 is product 42, as
// the handler sees it once decoded.
func unescape(v string) (string, error) {
	u, err := url.PathUnescape(v)
	if err != nil {
		return "", errEncoding
	}
	return u, nil
}

// urlParam returns the last value of chi URL parameter name, as
// chi.URLParam does, and whether the matched route has it.
func urlParam(rctx *chi.Context, name string) (string, bool) {
	keys := rctx.URLParams.Keys
	for i := len(keys) - 1; i >= 0; i-- {
		if keys[i] == name {
			return rctx.URLParams.Values[i], true
		}
	}
	return "", false
}

func pathValue(r *http.Request, name string) (string, error) {
	if v := r.PathValue(name); v != "" {
		return v, nil
	}
	if r.Pattern == "" {
		return "", errNotRouted
	}
	if !strings.Contains(r.Pattern, "{"+name+"}") && !strings.Contains(r.Pattern, "{"+name+"...}") {
		// The pattern matched: the middleware wraps this route's handler.
		return "", errNotInRoute
	}
	return "", errEmpty
}

// Header returns the key function of request header name. The resource
// name is the canonical header name (X-User-Id for "x-user-id"). A header
// given more than once is ambiguous: invalid.
//
// Panics if name is empty or longer than 256 bytes.
func Header(name string) Func {
	checkName("Header", name)
	canon := http.CanonicalHeaderKey(name)
	return one(source{
		name: canon,
		desc: "Header(" + canon + ")",
		http: func(r *http.Request) (string, error) { return single(r.Header[canon]) },
	})
}

// Query returns the key function of URL query parameter name. A parameter
// given more than once is ambiguous: invalid.
//
// Panics if name is empty or longer than 256 bytes.
func Query(name string) Func {
	checkName("Query", name)
	return one(source{
		name: name,
		desc: "Query(" + name + ")",
		http: func(r *http.Request) (string, error) {
			return single(r.URL.Query()[name])
		},
	})
}

// formMaxMemory is what net/http's FormValue keeps in memory of a
// multipart form.
const formMaxMemory = 32 << 20

// Form returns the key function of form value name, as r.FormValue sees it:
// the URL query and an application/x-www-form-urlencoded or
// multipart/form-data body. It parses the form (r.ParseMultipartForm), so
// the handler finds it in r.Form and r.PostForm rather than in r.Body. A
// value given more than once, in the body or the query, is ambiguous:
// invalid. A body too large to parse fails with ErrTooLarge.
//
// Panics if name is empty or longer than 256 bytes.
func Form(name string) Func {
	checkName("Form", name)
	return one(source{
		name: name,
		desc: "Form(" + name + ")",
		http: func(r *http.Request) (string, error) {
			if r.Form == nil {
				// ParseForm first: ParseMultipartForm would hide its error
				// behind ErrNotMultipart.
				err := r.ParseForm()
				if err == nil {
					if err = r.ParseMultipartForm(formMaxMemory); errors.Is(err, http.ErrNotMultipart) {
						err = nil
					}
				}
				if err != nil {
					var mbe *http.MaxBytesError
					if errors.As(err, &mbe) || errors.Is(err, multipart.ErrMessageTooLarge) {
						return "", ErrTooLarge
					}
					return "", invalid("malformed form")
				}
			}
			return single(r.Form[name])
		},
	})
}

func single(vs []string) (string, error) {
	switch len(vs) {
	case 0:
		return "", errMissing
	case 1:
		return vs[0], nil
	}
	return "", invalid("given %d times", len(vs))
}

// Context returns the key function of a value that earlier middleware put
// in the request's context under key, such as the ID of the authenticated
// user. It reads HTTP requests and gRPC calls alike. The value may be a
// string, an integer, a []byte or a fmt.Stringer; it is missing when the
// context has no value under key or the value is a nil pointer.
//
// Panics if name is empty or longer than 256 bytes, or
// key is nil.
func Context(name string, key any) Func {
	checkName("Context", name)
	if key == nil {
		panic("routelock: keyfunc.Context: nil key")
	}
	get := func(ctx context.Context) (string, error) { return contextValue(ctx.Value(key)) }
	return one(source{
		name: name,
		desc: "Context(" + name + ")",
		http: func(r *http.Request) (string, error) { return get(r.Context()) },
		rpc:  func(ctx context.Context, _ any) (string, error) { return get(ctx) },
	})
}

func contextValue(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", errMissing
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case int32:
		return strconv.FormatInt(int64(v), 10), nil
	case uint:
		return strconv.FormatUint(uint64(v), 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case uint32:
		return strconv.FormatUint(uint64(v), 10), nil
	case fmt.Stringer:
		if isNilPointer(v) {
			return "", errMissing
		}
		return v.String(), nil
	}
	return "", invalid("context value of type %T is not a string, integer or fmt.Stringer", v)
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
