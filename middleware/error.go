package middleware

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/routelock/lock/internal/chiroute"
	"github.com/routelock/lock/internal/outcome"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// Status returns the HTTP status for an error of the middleware:
//
//	400 Bad Request            key missing or invalid, malformed owner token
//	409 Conflict               lock held by another owner (fail fast, or the wait ran out)
//	410 Gone                   the resource's gate is closed: sold out (lockcore.ErrGateClosed)
//	404 Not Found              a lock before routing (a router's r.Use) on a path
//	                           that no route of the router matches; the middleware
//	                           itself answers with the router's NotFound handler
//	413 Content Too Large      body larger than a JSON key function reads
//	503 Service Unavailable    the engine (Redis) unreachable, or closed, or its
//	                           restart guard refusing fresh holds (lockcore.ErrRestartGuard)
//	500 Internal Server Error  the engine set up wrongly (lockcore.ErrMisconfigured:
//	                           a wrong password, a database out of range), and
//	                           a lock on a route that does not name its key
//	                           (a key error matching lockcore.ErrMisconfigured),
//	                           and anything else
func Status(err error) int {
	return outcome.First(outcome.Of(err, keyErrors...), statuses, http.StatusInternalServerError)
}

// keyErrors are the sentinels of the key functions and of the route match
// that Status tells apart from lockcore's, with the kinds they report. The
// other errors of key functions match lockcore's sentinels.
var keyErrors = []outcome.Sentinel{
	{Err: keyfunc.ErrTooLarge, Kind: outcome.TooLarge},
	{Err: chiroute.ErrNoRoute, Kind: outcome.NotFound},
}

// statuses is Status's table. Its order decides for an error of several
// kinds and is kept as it was: a body too large first, then no route, then
// a route without its key or a misconfigured engine (both
// lockcore.ErrMisconfigured), then an invalid key
// or token, then a closed gate, then a busy lock, then an unavailable or
// closed engine. A
// context error is not in it: a wait cut short by the request's context
// is answered as the wait's own error, or 500 when it has none.
var statuses = []outcome.Row[int]{
	{Kinds: outcome.TooLarge, To: http.StatusRequestEntityTooLarge},
	{Kinds: outcome.NotFound, To: http.StatusNotFound},
	{Kinds: outcome.Misconfigured, To: http.StatusInternalServerError},
	{Kinds: outcome.InvalidKey | outcome.InvalidToken, To: http.StatusBadRequest},
	{Kinds: outcome.GateClosed, To: http.StatusGone},
	{Kinds: outcome.Busy | outcome.Upgrade, To: http.StatusConflict},
	{Kinds: outcome.Unavailable | outcome.Closed, To: http.StatusServiceUnavailable},
}

// Error is the default Config.OnError. It answers with Status(err) and a
// one-line plain-text body that names what is wrong without repeating the
// request's values, Redis errors, keys or owner tokens: for an error of a
// key function, what its method Public() string returns (see
// keyfunc.ErrSkip). A 409 for a busy lock carries
// Retry-After: the engine's estimate of when the lock is free
// (lockcore.ContentionError.RetryAfter) rounded up to whole seconds, the
// header's unit, and at least 1 (so 1 for the engines' first hint of
// 100ms, given before they have seen a hold of the resource end); one for lockcore.ErrUpgrade (the request
// holds the lock shared and asked for it exclusively) does not: no retry
// helps. A 410 for a closed gate (lockcore.ErrGateClosed) reads "sold
// out" and carries no Retry-After either. A 503 while the engine's restart
// guard refuses fresh holds (a *lockcore.RestartGuardError, matching
// lockcore.ErrRestartGuard) says so, and carries Retry-After: the guard's
// time left, rounded up to whole seconds.
func Error(w http.ResponseWriter, r *http.Request, err error) {
	k := outcome.Of(err, keyErrors...)
	status := outcome.First(k, statuses, http.StatusInternalServerError)
	msg := "routelock: internal error"
	var kerr interface{ Public() string } // an error of a key function
	switch status {
	case http.StatusBadRequest:
		msg = "routelock: invalid lock key"
		switch {
		case errors.As(err, &kerr):
			msg += ": " + kerr.Public()
		case k.Has(outcome.InvalidToken):
			msg = "routelock: invalid " + tokenHeader + " header"
		}
	case http.StatusConflict:
		if k.Has(outcome.Upgrade) && !k.Has(outcome.Busy) {
			// No retry helps: the request itself holds the lock shared.
			msg = "routelock: the request holds this lock shared and cannot take it exclusively"
			break
		}
		msg = "routelock: resource busy, retry later"
		var cerr *lockcore.ContentionError
		secs := int64(1)
		if errors.As(err, &cerr) && cerr.RetryAfter > time.Second {
			secs = int64((cerr.RetryAfter + time.Second - 1) / time.Second)
		}
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	case http.StatusGone:
		msg = "routelock: sold out"
	case http.StatusRequestEntityTooLarge:
		msg = "routelock: request body too large"
	case http.StatusNotFound:
		msg = "404 page not found"
	case http.StatusServiceUnavailable:
		msg = "routelock: lock service unavailable"
		var gerr *lockcore.RestartGuardError
		if errors.As(err, &gerr) {
			msg = "routelock: lock service restarted without its data: no lock is taken until every earlier lease has ended"
			secs := max(int64((gerr.RetryAfter+time.Second-1)/time.Second), 1)
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		}
	case http.StatusInternalServerError:
		switch {
		case errors.As(err, &kerr):
			msg = "routelock: lock key: " + kerr.Public()
		case k.Has(outcome.Misconfigured):
			msg = "routelock: lock service misconfigured"
		}
	}
	http.Error(w, msg, status)
}
