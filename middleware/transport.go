package middleware

import (
	"net/http"

	"github.com/routelock/lock/lockcore"
)

// Transport returns an http.RoundTripper that adds the owner token of the
// request's context, if it has one, to outgoing requests in TokenHeader,
// and sends them with base (http.DefaultTransport if nil). A service that
// holds productID:42 and calls another service, or itself, with a client
// built on it re-enters the lock there instead of waiting for itself.
//
// Use it only on clients that call your own services: the token lets its
// bearer re-enter the locks of the request it belongs to.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base}
}

type transport struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper. It does not change req.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, ok := lockcore.TokenFrom(req.Context())
	if !ok {
		return t.base.RoundTrip(req)
	}
	r2 := req.Clone(req.Context())
	r2.Header.Set(TokenHeader, tok)
	return t.base.RoundTrip(r2)
}
