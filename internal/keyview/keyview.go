// Package keyview lets the HTTP middleware and the gRPC interceptors ask a
// key function (keyfunc.Func) what only they need to know of it: which
// protocols it reads, whether it reads a gRPC call's request message, the
// route parameters it reads, the resources it names, and whether a gRPC
// method's request message has the fields it reads.
//
// It exists because Go has no friend packages. Those answers are plumbing
// between keyfunc and the adapters that a user never calls; as exported
// methods of keyfunc.Func they were API to learn, document and keep. So
// keyfunc keeps them unexported and hands them to this package in an init
// function, and the adapters, which import keyfunc and so run after that
// init, read them here; google.golang.org/grpc/internal does the same for
// package grpc. This package cannot import keyfunc (keyfunc imports it), so
// it cannot name keyfunc.Func: it is generic in the key function's type F,
// and the adapters ask for Of[keyfunc.Func], so that every call is checked
// by the compiler, and a mismatch between what keyfunc set and what an
// adapter asks for panics once, when the adapter's package is initialised.
// It links nothing but the standard library (.ci/deps).
package keyview

// Funcs are what the adapters ask a key function f of type F.
type Funcs[F any] struct {
	// ForHTTP reports whether every source of f can read an HTTP request.
	// It is false for the zero Func, which has no sources.
	ForHTTP func(f F) bool

	// ForRPC reports whether every source of f can read a gRPC call. It is
	// false for the zero Func.
	ForRPC func(f F) bool

	// ReadsMessage reports whether f reads the gRPC request message (a
	// field of it, as interceptor.Field does, or a custom source without
	// BeforeMessage), rather than only the call's metadata and context:
	// a stream's key is then known only once its first message arrives.
	ReadsMessage func(f F) bool

	// Params returns the names of the route parameters f reads (Param), of
	// each of its resources, in order, each once: what a route locked on f
	// must have in its pattern (middleware.Check).
	Params func(f F) []string

	// Resources returns the key functions of the resources f names: f
	// alone, or, for a Func made with Also, f's own and each of the
	// others', in the order given.
	Resources func(f F) []F

	// CheckRPC tells, before any call, whether f can read the calls of a
	// gRPC method whose request messages are of req's type: the errors of
	// its sources' Source.Check (interceptor.Field's: a field path the
	// type does not have), each naming its source, joined; nil when they
	// pass or have none. Every resource of f is checked
	// (interceptor.Check).
	CheckRPC func(f F, req any) error
}

// funcs is the *Funcs[keyfunc.Func] that package keyfunc's init gave Set.
var funcs any

// Set makes f what Of returns. Package keyfunc calls it once, in an init
// function, and nothing else may.
func Set[F any](f *Funcs[F]) { funcs = f }

// Of returns what Set was given for key functions of type F. Call it in
// the initialiser of a package-level variable of a package that imports
// keyfunc, which is then initialised first.
//
// Panics if Set was not called for F: the caller does not import keyfunc,
// or asks for another type.
func Of[F any]() *Funcs[F] {
	f, ok := funcs.(*Funcs[F])
	if !ok {
		panic("routelock: keyview.Of: package keyfunc did not set the functions of this type; import it first")
	}
	return f
}
