// Package classifytest holds the errors that the classification tests of
// the middleware, the interceptors and the telemetry run through their
// tables, so that the three tables are over one list. Only tests import it.
package classifytest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/routelock/lock/internal/chiroute"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// Atom is one error an adapter may be given: a sentinel of lockcore,
// keyfunc or the context package, an error of a key function or an
// engine, or an error nobody knows.
type Atom struct {
	Name string
	Err  error
}

// Atoms returns the errors the classification tests run, alone, wrapped
// and joined in pairs; each call returns a fresh slice.
func Atoms() []Atom { return append([]Atom(nil), atoms...) }

// KeyError is the error of a key function described as desc whose
// source fails with err.
func KeyError(desc string, err error) error {
	f := keyfunc.Custom(keyfunc.Source{Name: "id", Desc: desc, HTTP: func(*http.Request) (string, error) { return "", err }})
	_, _, kerr := f.HTTP(httptest.NewRequest(http.MethodGet, "/", nil))
	return kerr
}

// NotRouted is the error of Param for a request that no router has
// matched.
func NotRouted() error {
	_, _, err := keyfunc.Param("id").HTTP(httptest.NewRequest(http.MethodGet, "/", nil))
	return err
}

// classifyAtoms are the errors TestStatusOfEveryError runs through Status
// and Error, alone, wrapped, and joined in pairs.
// atoms are the errors Atoms returns.
var atoms = []Atom{
	{"NotAcquired", lockcore.ErrNotAcquired},
	{"WaitTimeout", lockcore.ErrWaitTimeout},
	{"Busy", &lockcore.ContentionError{Key: "k", RetryAfter: 2500 * time.Millisecond}},
	{"TimedOut", &lockcore.ContentionError{Key: "k", RetryAfter: 300 * time.Millisecond, TimedOut: true}},
	{"LockLost", lockcore.ErrLockLost},
	{"Revoked", lockcore.ErrRevoked},
	{"Unavailable", lockcore.ErrUnavailable},
	{"Misconfigured", lockcore.ErrMisconfigured},
	{"InvalidKey", lockcore.ErrInvalidKey},
	{"InvalidToken", lockcore.ErrInvalidToken},
	{"Released", lockcore.ErrReleased},
	{"Closed", lockcore.ErrClosed},
	{"NotHeld", lockcore.ErrNotHeld},
	{"Canceled", context.Canceled},
	{"Deadline", context.DeadlineExceeded},
	{"Skip", keyfunc.ErrSkip},
	{"Missing", keyfunc.ErrMissing},
	{"Invalid", lockcore.ErrInvalidKey}, // what an invalid value matches
	{"TooLarge", keyfunc.ErrTooLarge},
	{"KeyMissing", KeyError("Param(id)", keyfunc.ErrMissing)},
	{"KeyTooLarge", KeyError("JSON(id)", keyfunc.ErrTooLarge)},
	{"KeyNotRouted", NotRouted()},
	{"KeyCustom", KeyError("Custom", errors.New("bad tenant"))},
	{"NoRoute", chiroute.ErrNoRoute},
	{"Other", errors.New("something else")},
}
