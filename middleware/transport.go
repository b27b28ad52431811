package middleware

import (
	"net/http"

	"github.com/routelock/lock/lockcore"
)

// Transport returns an http.RoundTripper that adds the owner tokens of the
// request's context, if it has any (lockcore.TokensFrom: those of every
// live lock the request holds and those it was given), to outgoing requests
// in TokenHeader, and sends them with base (http.DefaultTransport if nil).
// A service that holds productID:42 and calls another service, or itself,
// with a client built on it re-enters the lock there instead of waiting for
// itself.
//
// Use it only on clients that call your own services: a token lets its
// bearer re-enter the lock it belongs to while that lock is held.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base}
}

type transport struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper. It does not change req.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	toks := lockcore.TokensFrom(req.Context())
	if len(toks) == 0 {
		return t.base.RoundTrip(req)
	}
	r2 := req.Clone(req.Context())
	r2.Header.Set(TokenHeader, lockcore.JoinTokens(toks))
	return t.base.RoundTrip(r2)
}
