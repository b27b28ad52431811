package keyfunc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/routelock/lock/internal/keylimit"
	"github.com/routelock/lock/internal/keyview"
	"github.com/routelock/lock/lockcore"
)

// The errors of key functions. Those that [Func.HTTP] and [Func.RPC]
// return name the key function's source and match (errors.Is) one of:
//
//   - lockcore.ErrInvalidKey: the request's value is missing or empty
//     ([ErrMissing]), too long, ambiguous (given more than once), not a
//     scalar, or the request could not be parsed, or its body is too large
//     ([ErrTooLarge]). The middleware answers 400 (413 for ErrTooLarge),
//     the interceptor codes.InvalidArgument.
//   - lockcore.ErrMisconfigured: the route the middleware wraps has no such
//     parameter, or no router has matched the request yet (see [Param]): a
//     configuration error, answered 500.
//   - [ErrSkip]: the key does not apply to this request, which passes
//     unlocked.
//   - whatever a [Custom] source returned, kept as it is.
//
// Each of them has a method Public() string, which describes the error for
// the client: it names the source and says what is wrong, as in
// "Header(X-User-Id): given 2 times", and never repeats the request's
// value. The middleware's and the interceptor's default answers include it;
// an error handler of your own reads it with
//
//	var p interface{ Public() string }
//	if errors.As(err, &p) { ... p.Public() ... }
var (
	// ErrSkip means the key does not apply to this request: a lock in a
	// router's r.Use (chi's, before the router matched the route) met a
	// route that has no such parameter, or a path that routes of other
	// methods only match (the router answers 405). The middleware serves it
	// unlocked.
	ErrSkip = errors.New("routelock: key not applicable to this request")

	// ErrMissing means the value is absent or empty: the client did not
	// state the key, as opposed to stating it wrongly. It matches
	// lockcore.ErrInvalidKey.
	ErrMissing error = &sentinel{"routelock: key missing", lockcore.ErrInvalidKey}

	// ErrTooLarge means a request body was larger than the limit a key
	// function reads (JSON, Form). It matches lockcore.ErrInvalidKey; the
	// middleware answers it with 413 rather than 400.
	ErrTooLarge error = &sentinel{"routelock: request body too large", lockcore.ErrInvalidKey}
)

// sentinel is an error value of this package that matches one of
// lockcore's.
type sentinel struct {
	msg  string
	kind error
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Unwrap() error { return s.kind }

// keyError is the error of one key function for one request: the source
// that failed, such as "Header(X-User-Id)", and what went wrong, an error
// of this package or what a custom source returned.
type keyError struct {
	source string
	err    error
}

// Error reads "routelock: ", the source and what went wrong, with the
// prefix once: that of a wrapped error of this module is left out.
func (e *keyError) Error() string {
	return prefix + e.source + ": " + strings.TrimPrefix(e.err.Error(), prefix)
}

// prefix begins every error and panic of this module (see lockcore's
// sentinel errors).
const prefix = "routelock: "

func (e *keyError) Unwrap() error { return e.err }

// Public returns a description of the error that is safe to show to the
// client: it names the source and says what is wrong, and never repeats the
// request's value. For an error of a custom source (Custom) it says what
// the error's own method Public() string returns, if it has one, and
// otherwise only whether the value was missing or invalid.
func (e *keyError) Public() string {
	var p interface{ Public() string }
	if errors.As(e.err, &p) {
		return e.source + ": " + p.Public()
	}
	switch {
	case errors.Is(e.err, ErrMissing):
		return e.source + ": missing"
	case errors.Is(e.err, ErrTooLarge):
		return e.source + ": request body too large"
	}
	return e.source + ": invalid"
}

// detail is an error of this package: a sentinel, words for the client
// that never repeat the value, and more words for the log, if any.
type detail struct {
	sentinel error
	msg      string
	more     string
}

func (d *detail) Error() string  { return d.msg + d.more }
func (d *detail) Unwrap() error  { return d.sentinel }
func (d *detail) Public() string { return d.msg }

func invalid(format string, args ...any) error {
	return &detail{sentinel: lockcore.ErrInvalidKey, msg: fmt.Sprintf(format, args...)}
}

func missing(msg string) error { return &detail{sentinel: ErrMissing, msg: msg} }

var (
	errMissing  = missing("missing")
	errEmpty    = missing("empty")
	errNotFound = missing("not found")
)

// Func derives the parts of a lock key from a request: for each of its
// sources, the resource name and the request's value, as in
// ["productID", "42"]. Build one with the functions of this package; the
// zero Func has no sources and fails every request. A Func is a value:
// it is safe for concurrent use and its methods never change it.
type Func struct {
	groups []group
	also   []Func // the other resources of a Func made with Also
}

// group is a run of sources that shares one name (As), or sources that
// each bring their own (name == "").
type group struct {
	name string
	srcs []source
}

// source is one place a value comes from.
type source struct {
	name string // the resource name, e.g. "productID"
	desc string // for errors, e.g. "Param(productID)"
	http func(*http.Request) (string, error)
	rpc  func(ctx context.Context, req any) (string, error)

	// httpRoute reads an HTTP request in place of http, and also returns
	// the template of the route it matched ahead of the router, "" if it
	// matched none (Param).
	httpRoute func(*http.Request) (value, route string, err error)

	message bool // rpc reads the request message (interceptor.Field)

	param string // the route parameter it reads (Param), else ""

	check func(req any) error // Source.Check
}

func one(s source) Func { return Func{groups: []group{{srcs: []source{s}}}} }

// checkName panics unless name is usable as a resource name.
func checkName(fn, name string) {
	if name == "" {
		panic("routelock: keyfunc." + fn + ": empty name")
	}
	if len(name) > keylimit.PartLen {
		panic(fmt.Sprintf("routelock: keyfunc.%s: name longer than %d bytes", fn, keylimit.PartLen))
	}
}

// Join returns a key made of the parts of fs in order, such as a product
// and a user: Join(Param("productID"), Header("X-User-ID")) yields
// ["productID", "42", "X-User-Id", "u7"]. The parts stay distinct (lockcore
// escapes the separator), so no two requests with different values share a
// key.
//
// Panics if fs is empty or the key would have more than
// 8 parts, names included.
func Join(fs ...Func) Func {
	if len(fs) == 0 {
		panic("routelock: keyfunc.Join of nothing")
	}
	var j Func
	for _, f := range fs {
		if len(f.groups) == 0 {
			panic("routelock: keyfunc.Join: zero Func")
		}
		if len(f.also) > 0 {
			panic("routelock: keyfunc.Join of a Func with Also")
		}
		j.groups = append(j.groups, f.groups...)
	}
	if n := j.parts(); n > keylimit.Parts {
		panic(fmt.Sprintf("routelock: keyfunc.Join: %d key parts, more than %d", n, keylimit.Parts))
	}
	return j
}

// As returns f with its resource names replaced by name: the key is name
// followed by f's values, as in Param("productID").As("product") →
// ["product", "42"]. Use it to give one resource the same key on routes
// and methods that spell it differently, or separate keys to routes that
// should not exclude each other.
//
// Panics if name is empty or longer than 256 bytes, or
// if f is the zero Func.
func (f Func) As(name string) Func {
	checkName("As", name)
	if len(f.groups) == 0 {
		panic("routelock: keyfunc.As of a zero Func")
	}
	if len(f.also) > 0 {
		panic("routelock: keyfunc.As of a Func with Also: name each resource before Also")
	}
	g := group{name: name}
	for _, fg := range f.groups {
		g.srcs = append(g.srcs, fg.srcs...)
	}
	return Func{groups: []group{g}}
}

// Also returns a Func that names several resources, each locked on its
// own: f's and each of more's, such as a product and the buyer,
// Param("productID").Also(Header("X-User-ID").As("userID")). The HTTP
// middleware and the gRPC interceptors take all their locks or none, in
// one wait budget and in an order of their own (lifecycle.AcquireAll), so
// that routes naming the same resources in any order never deadlock; the
// handler's context holds them all (lock.Keys lists them, each with its
// own fencing token). HTTP and RPC evaluate f's own key; the adapters
// evaluate every one. A value one of them lacks fails the request, as f's
// own would.
//
// Panics if f or any of more is the zero Func.
func (f Func) Also(more ...Func) Func {
	if len(f.groups) == 0 {
		panic("routelock: keyfunc.Also of a zero Func")
	}
	a := Func{groups: f.groups, also: slices.Clone(f.also)}
	for _, m := range more {
		if len(m.groups) == 0 {
			panic("routelock: keyfunc.Also: zero Func")
		}
		a.also = append(a.also, Func{groups: m.groups})
		a.also = append(a.also, m.also...)
	}
	return a
}

// resources returns the key functions of the resources f names: f alone,
// or for a Func made with Also, f's own and each of the others, in the
// order given.
func (f Func) resources() []Func {
	if len(f.also) == 0 {
		return []Func{f}
	}
	return append([]Func{{groups: f.groups}}, f.also...)
}

// parts returns how many key parts f yields.
func (f Func) parts() int {
	n := 0
	for _, g := range f.groups {
		if g.name != "" {
			n += 1 + len(g.srcs)
		} else {
			n += 2 * len(g.srcs)
		}
	}
	return n
}

// forHTTP reports whether every source of f can read an HTTP request.
// It is false for the zero Func, which has no sources.
func (f Func) forHTTP() bool {
	return f.all(func(s *source) bool { return s.http != nil || s.httpRoute != nil })
}

// forRPC reports whether every source of f can read a gRPC call. It is
// false for the zero Func, which has no sources.
func (f Func) forRPC() bool { return f.all(func(s *source) bool { return s.rpc != nil }) }

func (f Func) all(ok func(*source) bool) bool {
	if len(f.groups) == 0 {
		return false
	}
	for _, g := range f.groups {
		for i := range g.srcs {
			if !ok(&g.srcs[i]) {
				return false
			}
		}
	}
	for _, a := range f.also {
		if !a.all(ok) {
			return false
		}
	}
	return true
}

// params returns the names of the route parameters that f reads (Param),
// of each resource of a Func made with Also too, in order, each once: what
// a route locked on f must have in its pattern (middleware.Check tells).
func (f Func) params() []string {
	var ps []string
	for _, r := range f.resources() {
		for _, g := range r.groups {
			for _, s := range g.srcs {
				if s.param != "" && !slices.Contains(ps, s.param) {
					ps = append(ps, s.param)
				}
			}
		}
	}
	return ps
}

// readsMessage reports whether f reads the gRPC request message (a field
// of it, as interceptor.Field does, or a Custom source without
// BeforeMessage), rather than only the call's metadata and context. For a
// stream such a key is known only once the first message arrives.
func (f Func) readsMessage() bool {
	return len(f.groups) > 0 && !f.all(func(s *source) bool { return !s.message })
}

// String describes f, as in Join(Param(productID), Header(X-User-Id)), or
// Param(productID).Also(Header(X-User-Id).As(userID)).
func (f Func) String() string {
	if len(f.also) > 0 {
		var b strings.Builder
		b.WriteString(Func{groups: f.groups}.String())
		b.WriteString(".Also(")
		for i, a := range f.also {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(a.String())
		}
		b.WriteString(")")
		return b.String()
	}
	var b strings.Builder
	var n int
	for _, g := range f.groups {
		n += len(g.srcs)
	}
	if n > 1 {
		b.WriteString("Join(")
	}
	first := true
	for _, g := range f.groups {
		for _, s := range g.srcs {
			if !first {
				b.WriteString(", ")
			}
			first = false
			b.WriteString(s.desc)
		}
	}
	if n > 1 {
		b.WriteString(")")
	}
	if len(f.groups) == 1 && f.groups[0].name != "" {
		b.WriteString(".As(" + f.groups[0].name + ")")
	}
	if n == 0 {
		return "Func{}"
	}
	return b.String()
}

// HTTP returns the key parts for an HTTP request. The error, one of the
// package's errors described at ErrSkip, matches ErrSkip when the route
// does not name the resource, lockcore.ErrInvalidKey for a bad value
// (ErrMissing, ErrTooLarge), or lockcore.ErrMisconfigured for a route that
// cannot name it.
//
// route is the template of r's route, such as /products/{productID}/buy,
// when a source of f had to match the route itself because the router had
// not yet (Param in a chi router's r.Use), so that the caller need not
// match it again; "" when no source did, and with an error.
func (f Func) HTTP(r *http.Request) (parts []string, route string, err error) {
	parts, err = f.eval(func(s *source) (string, error) {
		switch {
		case s.httpRoute != nil:
			v, rt, err := s.httpRoute(r)
			if route == "" {
				route = rt
			}
			return v, err
		case s.http != nil:
			return s.http(r)
		}
		return "", invalid("not available for HTTP requests")
	})
	if err != nil {
		return nil, "", err
	}
	return parts, route, nil
}

// RPC returns the key parts for a gRPC call with request message req (for
// a stream, its first message, or nil when no source of f reads the
// message: see Source.BeforeMessage).
// Errors are as for HTTP; ErrSkip means the message type has no such
// field.
func (f Func) RPC(ctx context.Context, req any) ([]string, error) {
	return f.eval(func(s *source) (string, error) {
		if s.rpc == nil {
			return "", invalid("not available for gRPC calls")
		}
		return s.rpc(ctx, req)
	})
}

func (f Func) eval(get func(*source) (string, error)) ([]string, error) {
	if len(f.groups) == 0 {
		return nil, &keyError{source: "Func{}", err: invalid("zero Func")}
	}
	parts := make([]string, 0, f.parts())
	for gi := range f.groups {
		g := &f.groups[gi]
		if g.name != "" {
			parts = append(parts, g.name)
		}
		for i := range g.srcs {
			s := &g.srcs[i]
			v, err := get(s)
			if err == nil {
				v = canonical(v)
				err = checkValue(v)
			}
			if err != nil {
				return nil, &keyError{source: s.desc, err: err}
			}
			if g.name == "" {
				parts = append(parts, s.name)
			}
			parts = append(parts, v)
		}
	}
	return parts, nil
}

var errTooLong = invalid("longer than %d bytes", keylimit.PartLen)

func checkValue(v string) error {
	switch {
	case v == "":
		return errEmpty
	case len(v) > keylimit.PartLen:
		return errTooLong
	}
	return nil
}

// Source is a source of key values of your own, for Custom: a resource
// name and the functions that read its value from an HTTP request, a gRPC
// call, or both.
type Source struct {
	// Name is the resource name, the key part before the value. Required.
	Name string

	// Desc describes the source in errors, and so to the client, such as
	// "Field(product_id)". Default: "Custom(Name)".
	Desc string

	// HTTP reads the value from an HTTP request. Nil: the source does not
	// read HTTP requests.
	HTTP func(*http.Request) (string, error)

	// RPC reads the value from a gRPC call, given the call's context and
	// its request message (for a stream, its first message). Nil: the
	// source does not read gRPC calls.
	RPC func(ctx context.Context, req any) (string, error)

	// BeforeMessage says that RPC reads only the call's context and
	// metadata, never req, so that a stream is locked before its handler
	// runs; RPC then gets a nil req for a stream. Otherwise a stream is
	// locked on its first message.
	BeforeMessage bool

	// Check, if set, tells before any call whether RPC can read the calls
	// of a gRPC method, given a request message of the method's type (an
	// empty one: only its type counts): nil, or an error that says what
	// the type lacks, such as the field RPC reads. interceptor.Check calls
	// it at startup. interceptor.Field has one.
	Check func(req any) error
}

// Custom returns the key function of s. HTTP and RPC should return an
// error matching lockcore.ErrInvalidKey for a bad request (ErrMissing for
// a value the request lacks; the middleware answers 400, the interceptor
// codes.InvalidArgument), or ErrSkip for a request the key does not apply
// to. Any other error is answered 500 / codes.Internal. An empty value
// counts as missing.
//
// The client is told s.Desc and, unless the error has a method
// Public() string, only whether the value was missing or invalid; an error
// with that method is told as s.Desc, ": " and what Public returns, which
// must never repeat the request's value.
//
// Panics if s.Name is empty or longer than 256 bytes,
// or s has neither HTTP nor RPC.
func Custom(s Source) Func {
	checkName("Custom", s.Name)
	if s.HTTP == nil && s.RPC == nil {
		panic("routelock: keyfunc.Custom(" + s.Name + "): neither HTTP nor RPC")
	}
	desc := s.Desc
	if desc == "" {
		desc = "Custom(" + s.Name + ")"
	}
	return one(source{
		name:    s.Name,
		desc:    desc,
		http:    s.HTTP,
		rpc:     s.RPC,
		message: s.RPC != nil && !s.BeforeMessage,
		check:   s.Check,
	})
}

// checkRPC tells, before any call, whether f can read the calls of a gRPC
// method whose request messages are of req's type (req's value does not
// count): it returns the errors of the Source.Check of f's sources
// (interceptor.Field's: a field path the type does not have), each
// naming its source, joined; nil when they pass or have no Check. The
// resources of a Func made with Also are checked too.
func (f Func) checkRPC(req any) error {
	var errs []error
	for _, r := range f.resources() {
		for _, g := range r.groups {
			for i := range g.srcs {
				if s := &g.srcs[i]; s.check != nil {
					if err := s.check(req); err != nil {
						errs = append(errs, &keyError{source: s.desc, err: err})
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// The middleware and the interceptors read what only they ask of a Func
// through package keyview (see its documentation): these methods are not
// part of the API.
func init() {
	keyview.Set(&keyview.Funcs[Func]{
		ForHTTP:      Func.forHTTP,
		ForRPC:       Func.forRPC,
		ReadsMessage: Func.readsMessage,
		Params:       Func.params,
		Resources:    Func.resources,
		CheckRPC:     Func.checkRPC,
	})
}
