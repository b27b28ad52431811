package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/routelock/lock/internal/classifytest"
	"github.com/routelock/lock/middleware"
)

// classifyAtom is one error the middleware may be given: a sentinel of
// lockcore, keyfunc or the context package, an error of a key function or
// an engine, or an error nobody knows.
type classifyAtom struct {
	name string
	err  error
}

// classifyAtoms are the errors TestStatusOfEveryError runs through Status
// and Error, alone, wrapped, and joined in pairs.
var classifyAtoms = func() []classifyAtom {
	var out []classifyAtom
	for _, a := range classifytest.Atoms() {
		out = append(out, classifyAtom{a.Name, a.Err})
	}
	return out
}()

// httpAnswer is what Error answers for err, on one line: the status, the
// Retry-After header (- when there is none) and the body.
func httpAnswer(err error) string {
	rec := httptest.NewRecorder()
	middleware.Error(rec, httptest.NewRequest(http.MethodGet, "/", nil), err)
	if s := middleware.Status(err); s != rec.Code {
		return fmt.Sprintf("Status %d but Error %d", s, rec.Code)
	}
	ra := rec.Header().Get("Retry-After")
	if ra == "" {
		ra = "-"
	}
	return fmt.Sprintf("%d %s %s", rec.Code, ra, strings.TrimSpace(rec.Body.String()))
}

// TestStatusOfEveryError: Status and Error give each error, alone, wrapped
// (with fmt.Errorf, or next to a context error) and joined with each other
// error, the answer they gave before their table was written over
// internal/outcome. The answers below were recorded from the classifier
// that matched each sentinel in its own switch.
func TestStatusOfEveryError(t *testing.T) {
	var got strings.Builder
	got.WriteString("\n")
	line := func(name string, err error) { fmt.Fprintf(&got, "%s: %s\n", name, httpAnswer(err)) }
	line("nil", nil)
	for _, a := range classifyAtoms {
		line(a.name, a.err)
	}
	for _, a := range classifyAtoms {
		line("wrapped "+a.name, fmt.Errorf("acquire %q: %w", "k", a.err))
		line("twice wrapped "+a.name, fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", a.err)))
		line(a.name+" with Canceled", fmt.Errorf("%w: %w", a.err, context.Canceled))
		line(a.name+" with Deadline", fmt.Errorf("%w: %w", a.err, context.DeadlineExceeded))
	}
	if g := got.String(); g != statusSingles {
		t.Errorf("answers changed; now:\n%s", g)
	}

	// Each ordered pair, joined: a cell is the status, then the body as
	// a letter of statusMessages, then the Retry-After seconds if any.
	got.Reset()
	got.WriteString("\n")
	msgs := strings.Split(strings.TrimSpace(statusMessages), "\n")
	for _, a := range classifyAtoms {
		row := fmt.Sprintf("%-13s", a.name)
		for _, b := range classifyAtoms {
			rec := httptest.NewRecorder()
			err := errors.Join(a.err, b.err)
			middleware.Error(rec, httptest.NewRequest(http.MethodGet, "/", nil), err)
			if s := middleware.Status(err); s != rec.Code {
				t.Errorf("Join(%s, %s): Status %d, Error %d", a.name, b.name, s, rec.Code)
			}
			tag := "?"
			for i, m := range msgs {
				if m == strings.TrimSpace(rec.Body.String()) {
					tag = string(rune('a' + i))
				}
			}
			if tag == "?" {
				t.Errorf("Join(%s, %s): body %q not in statusMessages", a.name, b.name, rec.Body.String())
			}
			row += fmt.Sprintf(" %3d%s%-1s", rec.Code, tag, rec.Header().Get("Retry-After"))
		}
		got.WriteString(strings.TrimRight(row, " ") + "\n")
	}
	if g := got.String(); g != statusPairs {
		t.Errorf("answers to joined pairs changed; now:\n%s", g)
	}
}

// statusMessages are the bodies Error writes, one a line, lettered a, b, …
// in statusPairs.
const statusMessages = `
routelock: resource busy, retry later
routelock: lock service misconfigured
routelock: invalid lock key
routelock: invalid Routelock-Token header
routelock: request body too large
routelock: internal error
routelock: invalid lock key: Param(id): missing
routelock: lock key: Param(id): request not routed
404 page not found
routelock: lock service unavailable
routelock: lock key: Custom: invalid
routelock: lock key: Param(id): missing
routelock: invalid lock key: Custom: invalid
`

// statusSingles are the answers of Error to single errors.
const statusSingles = `
nil: 500 - routelock: internal error
NotAcquired: 409 1 routelock: resource busy, retry later
WaitTimeout: 409 1 routelock: resource busy, retry later
Busy: 409 3 routelock: resource busy, retry later
TimedOut: 409 1 routelock: resource busy, retry later
LockLost: 500 - routelock: internal error
Revoked: 500 - routelock: internal error
Unavailable: 503 - routelock: lock service unavailable
Misconfigured: 500 - routelock: lock service misconfigured
InvalidKey: 400 - routelock: invalid lock key
InvalidToken: 400 - routelock: invalid Routelock-Token header
Released: 500 - routelock: internal error
Closed: 503 - routelock: lock service unavailable
NotHeld: 500 - routelock: internal error
Canceled: 500 - routelock: internal error
Deadline: 500 - routelock: internal error
Skip: 500 - routelock: internal error
Missing: 400 - routelock: invalid lock key
Invalid: 400 - routelock: invalid lock key
TooLarge: 413 - routelock: request body too large
KeyMissing: 400 - routelock: invalid lock key: Param(id): missing
KeyTooLarge: 413 - routelock: request body too large
KeyNotRouted: 500 - routelock: lock key: Param(id): request not routed
KeyCustom: 500 - routelock: lock key: Custom: invalid
NoRoute: 404 - 404 page not found
Other: 500 - routelock: internal error
wrapped NotAcquired: 409 1 routelock: resource busy, retry later
twice wrapped NotAcquired: 409 1 routelock: resource busy, retry later
NotAcquired with Canceled: 409 1 routelock: resource busy, retry later
NotAcquired with Deadline: 409 1 routelock: resource busy, retry later
wrapped WaitTimeout: 409 1 routelock: resource busy, retry later
twice wrapped WaitTimeout: 409 1 routelock: resource busy, retry later
WaitTimeout with Canceled: 409 1 routelock: resource busy, retry later
WaitTimeout with Deadline: 409 1 routelock: resource busy, retry later
wrapped Busy: 409 3 routelock: resource busy, retry later
twice wrapped Busy: 409 3 routelock: resource busy, retry later
Busy with Canceled: 409 3 routelock: resource busy, retry later
Busy with Deadline: 409 3 routelock: resource busy, retry later
wrapped TimedOut: 409 1 routelock: resource busy, retry later
twice wrapped TimedOut: 409 1 routelock: resource busy, retry later
TimedOut with Canceled: 409 1 routelock: resource busy, retry later
TimedOut with Deadline: 409 1 routelock: resource busy, retry later
wrapped LockLost: 500 - routelock: internal error
twice wrapped LockLost: 500 - routelock: internal error
LockLost with Canceled: 500 - routelock: internal error
LockLost with Deadline: 500 - routelock: internal error
wrapped Revoked: 500 - routelock: internal error
twice wrapped Revoked: 500 - routelock: internal error
Revoked with Canceled: 500 - routelock: internal error
Revoked with Deadline: 500 - routelock: internal error
wrapped Unavailable: 503 - routelock: lock service unavailable
twice wrapped Unavailable: 503 - routelock: lock service unavailable
Unavailable with Canceled: 503 - routelock: lock service unavailable
Unavailable with Deadline: 503 - routelock: lock service unavailable
wrapped Misconfigured: 500 - routelock: lock service misconfigured
twice wrapped Misconfigured: 500 - routelock: lock service misconfigured
Misconfigured with Canceled: 500 - routelock: lock service misconfigured
Misconfigured with Deadline: 500 - routelock: lock service misconfigured
wrapped InvalidKey: 400 - routelock: invalid lock key
twice wrapped InvalidKey: 400 - routelock: invalid lock key
InvalidKey with Canceled: 400 - routelock: invalid lock key
InvalidKey with Deadline: 400 - routelock: invalid lock key
wrapped InvalidToken: 400 - routelock: invalid Routelock-Token header
twice wrapped InvalidToken: 400 - routelock: invalid Routelock-Token header
InvalidToken with Canceled: 400 - routelock: invalid Routelock-Token header
InvalidToken with Deadline: 400 - routelock: invalid Routelock-Token header
wrapped Released: 500 - routelock: internal error
twice wrapped Released: 500 - routelock: internal error
Released with Canceled: 500 - routelock: internal error
Released with Deadline: 500 - routelock: internal error
wrapped Closed: 503 - routelock: lock service unavailable
twice wrapped Closed: 503 - routelock: lock service unavailable
Closed with Canceled: 503 - routelock: lock service unavailable
Closed with Deadline: 503 - routelock: lock service unavailable
wrapped NotHeld: 500 - routelock: internal error
twice wrapped NotHeld: 500 - routelock: internal error
NotHeld with Canceled: 500 - routelock: internal error
NotHeld with Deadline: 500 - routelock: internal error
wrapped Canceled: 500 - routelock: internal error
twice wrapped Canceled: 500 - routelock: internal error
Canceled with Canceled: 500 - routelock: internal error
Canceled with Deadline: 500 - routelock: internal error
wrapped Deadline: 500 - routelock: internal error
twice wrapped Deadline: 500 - routelock: internal error
Deadline with Canceled: 500 - routelock: internal error
Deadline with Deadline: 500 - routelock: internal error
wrapped Skip: 500 - routelock: internal error
twice wrapped Skip: 500 - routelock: internal error
Skip with Canceled: 500 - routelock: internal error
Skip with Deadline: 500 - routelock: internal error
wrapped Missing: 400 - routelock: invalid lock key
twice wrapped Missing: 400 - routelock: invalid lock key
Missing with Canceled: 400 - routelock: invalid lock key
Missing with Deadline: 400 - routelock: invalid lock key
wrapped Invalid: 400 - routelock: invalid lock key
twice wrapped Invalid: 400 - routelock: invalid lock key
Invalid with Canceled: 400 - routelock: invalid lock key
Invalid with Deadline: 400 - routelock: invalid lock key
wrapped TooLarge: 413 - routelock: request body too large
twice wrapped TooLarge: 413 - routelock: request body too large
TooLarge with Canceled: 413 - routelock: request body too large
TooLarge with Deadline: 413 - routelock: request body too large
wrapped KeyMissing: 400 - routelock: invalid lock key: Param(id): missing
twice wrapped KeyMissing: 400 - routelock: invalid lock key: Param(id): missing
KeyMissing with Canceled: 400 - routelock: invalid lock key: Param(id): missing
KeyMissing with Deadline: 400 - routelock: invalid lock key: Param(id): missing
wrapped KeyTooLarge: 413 - routelock: request body too large
twice wrapped KeyTooLarge: 413 - routelock: request body too large
KeyTooLarge with Canceled: 413 - routelock: request body too large
KeyTooLarge with Deadline: 413 - routelock: request body too large
wrapped KeyNotRouted: 500 - routelock: lock key: Param(id): request not routed
twice wrapped KeyNotRouted: 500 - routelock: lock key: Param(id): request not routed
KeyNotRouted with Canceled: 500 - routelock: lock key: Param(id): request not routed
KeyNotRouted with Deadline: 500 - routelock: lock key: Param(id): request not routed
wrapped KeyCustom: 500 - routelock: lock key: Custom: invalid
twice wrapped KeyCustom: 500 - routelock: lock key: Custom: invalid
KeyCustom with Canceled: 500 - routelock: lock key: Custom: invalid
KeyCustom with Deadline: 500 - routelock: lock key: Custom: invalid
wrapped NoRoute: 404 - 404 page not found
twice wrapped NoRoute: 404 - 404 page not found
NoRoute with Canceled: 404 - 404 page not found
NoRoute with Deadline: 404 - 404 page not found
wrapped Other: 500 - routelock: internal error
twice wrapped Other: 500 - routelock: internal error
Other with Canceled: 500 - routelock: internal error
Other with Deadline: 500 - routelock: internal error
`

// statusPairs are the answers of Error to errors.Join(row, column), the
// columns in the order of the rows (classifyAtoms).
const statusPairs = `
NotAcquired   409a1 409a1 409a3 409a1 409a1 409a1 409a1 500b  400c  400d  409a1 409a1 409a1 409a1 409a1 409a1 400c  400c  413e  400g  413e  500h  409a1 404i  409a1
WaitTimeout   409a1 409a1 409a3 409a1 409a1 409a1 409a1 500b  400c  400d  409a1 409a1 409a1 409a1 409a1 409a1 400c  400c  413e  400g  413e  500h  409a1 404i  409a1
Busy          409a3 409a3 409a3 409a3 409a3 409a3 409a3 500b  400c  400d  409a3 409a3 409a3 409a3 409a3 409a3 400c  400c  413e  400g  413e  500h  409a3 404i  409a3
TimedOut      409a1 409a1 409a1 409a1 409a1 409a1 409a1 500b  400c  400d  409a1 409a1 409a1 409a1 409a1 409a1 400c  400c  413e  400g  413e  500h  409a1 404i  409a1
LockLost      409a1 409a1 409a3 409a1 500f  500f  503j  500b  400c  400d  500f  503j  500f  500f  500f  500f  400c  400c  413e  400g  413e  500h  500k  404i  500f
Revoked       409a1 409a1 409a3 409a1 500f  500f  503j  500b  400c  400d  500f  503j  500f  500f  500f  500f  400c  400c  413e  400g  413e  500h  500k  404i  500f
Unavailable   409a1 409a1 409a3 409a1 503j  503j  503j  500b  400c  400d  503j  503j  503j  503j  503j  503j  400c  400c  413e  400g  413e  500h  503j  404i  503j
Misconfigured 500b  500b  500b  500b  500b  500b  500b  500b  500b  500b  500b  500b  500b  500b  500b  500b  500b  500b  413e  500l  413e  500h  500k  404i  500b
InvalidKey    400c  400c  400c  400c  400c  400c  400c  500b  400c  400d  400c  400c  400c  400c  400c  400c  400c  400c  413e  400g  413e  500h  400m  404i  400c
InvalidToken  400d  400d  400d  400d  400d  400d  400d  500b  400d  400d  400d  400d  400d  400d  400d  400d  400d  400d  413e  400g  413e  500h  400m  404i  400d
Released      409a1 409a1 409a3 409a1 500f  500f  503j  500b  400c  400d  500f  503j  500f  500f  500f  500f  400c  400c  413e  400g  413e  500h  500k  404i  500f
Closed        409a1 409a1 409a3 409a1 503j  503j  503j  500b  400c  400d  503j  503j  503j  503j  503j  503j  400c  400c  413e  400g  413e  500h  503j  404i  503j
NotHeld       409a1 409a1 409a3 409a1 500f  500f  503j  500b  400c  400d  500f  503j  500f  500f  500f  500f  400c  400c  413e  400g  413e  500h  500k  404i  500f
Canceled      409a1 409a1 409a3 409a1 500f  500f  503j  500b  400c  400d  500f  503j  500f  500f  500f  500f  400c  400c  413e  400g  413e  500h  500k  404i  500f
Deadline      409a1 409a1 409a3 409a1 500f  500f  503j  500b  400c  400d  500f  503j  500f  500f  500f  500f  400c  400c  413e  400g  413e  500h  500k  404i  500f
Skip          409a1 409a1 409a3 409a1 500f  500f  503j  500b  400c  400d  500f  503j  500f  500f  500f  500f  400c  400c  413e  400g  413e  500h  500k  404i  500f
Missing       400c  400c  400c  400c  400c  400c  400c  500b  400c  400d  400c  400c  400c  400c  400c  400c  400c  400c  413e  400g  413e  500h  400m  404i  400c
Invalid       400c  400c  400c  400c  400c  400c  400c  500b  400c  400d  400c  400c  400c  400c  400c  400c  400c  400c  413e  400g  413e  500h  400m  404i  400c
TooLarge      413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e
KeyMissing    400g  400g  400g  400g  400g  400g  400g  500l  400g  400g  400g  400g  400g  400g  400g  400g  400g  400g  413e  400g  413e  500l  400g  404i  400g
KeyTooLarge   413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e  413e
KeyNotRouted  500h  500h  500h  500h  500h  500h  500h  500h  500h  500h  500h  500h  500h  500h  500h  500h  500h  500h  413e  500h  413e  500h  500h  404i  500h
KeyCustom     409a1 409a1 409a3 409a1 500k  500k  503j  500k  400m  400m  500k  503j  500k  500k  500k  500k  400m  400m  413e  400m  413e  500k  500k  404i  500k
NoRoute       404i  404i  404i  404i  404i  404i  404i  404i  404i  404i  404i  404i  404i  404i  404i  404i  404i  404i  413e  404i  413e  404i  404i  404i  404i
Other         409a1 409a1 409a3 409a1 500f  500f  503j  500b  400c  400d  500f  503j  500f  500f  500f  500f  400c  400c  413e  400g  413e  500h  500k  404i  500f
`
