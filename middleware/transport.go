package middleware

import (
	"net/http"
	"strings"

	"github.com/routelock/lock/internal/lifecycle"
)

// Transport returns an http.RoundTripper that adds the owner tokens of the
// request's context, if it has any (lifecycle.Outbound: those of every
// live lock the request holds and those it was given), to outgoing requests
// in the Routelock-Token header, and sends them with base (http.DefaultTransport if nil).
// A service that holds productID:42 and calls another service, or itself,
// with a client built on it re-enters the lock there instead of waiting for
// itself.
//
// Use it only on clients that call your own services: a token lets its
// bearer re-enter the lock it belongs to while that lock is held. A
// redirect followed by http.Client carries the tokens only to the scheme,
// host and port of the request that started it (or from http to https
// there): like Authorization and Cookie, they never follow a redirect to
// another host.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base}
}

type transport struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper. It does not change req.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok := lifecycle.Outbound(req.Context())
	if tok == "" || !sameOrigin(req) {
		return t.base.RoundTrip(req)
	}
	r2 := req.Clone(req.Context())
	r2.Header.Set(tokenHeader, tok)
	return t.base.RoundTrip(r2)
}

// sameOrigin reports whether req goes where the request that started it
// went: http.Client follows a redirect with a new request, whose Response
// is the redirect that caused it, in the same context. An upgrade from http
// to https on the same host counts as the same; a downgrade does not.
func sameOrigin(req *http.Request) bool {
	first := req
	for i := 0; i < maxRedirects && first.Response != nil && first.Response.Request != nil; i++ {
		first = first.Response.Request
	}
	if first == req {
		return true
	}
	if first.Response != nil && first.Response.Request != nil {
		return false // a chain longer than any client follows: not ours to trust
	}
	a, b := first.URL, req.URL
	if !strings.EqualFold(a.Host, b.Host) {
		return false
	}
	return strings.EqualFold(a.Scheme, b.Scheme) || strings.EqualFold(a.Scheme, "http") && strings.EqualFold(b.Scheme, "https")
}

// maxRedirects bounds the walk back to the first request: http.Client stops
// after 10 redirects; a CheckRedirect of its own may allow more, and past
// this many the tokens stay home.
const maxRedirects = 64
