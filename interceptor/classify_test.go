package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/classifytest"
)

// classifyAtom is one error the interceptors may be given: a sentinel of
// lockcore, keyfunc or the context package, an error of a key function or
// an engine, or an error nobody knows.
type classifyAtom struct {
	name string
	err  error
}

// classifyAtoms are the errors TestCodeOfEveryError runs through Code and
// Status, alone, wrapped, and joined in pairs.
var classifyAtoms = func() []classifyAtom {
	var out []classifyAtom
	for _, a := range classifytest.Atoms() {
		out = append(out, classifyAtom{a.Name, a.Err})
	}
	return out
}()

// rpcAnswer is what Status answers for err: its code, its message and the
// delay of its RetryInfo detail (- when there is none).
func rpcAnswer(err error) (code int, msg, retry string) {
	st, ok := status.FromError(interceptor.Status(err))
	if !ok {
		return -1, "not a status", "-"
	}
	retry = "-"
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri.GetRetryDelay().AsDuration().String()
		} else {
			retry = fmt.Sprintf("detail %T", d)
		}
	}
	return int(st.Code()), st.Message(), retry
}

// TestCodeOfEveryError: Code and Status give each error, alone, wrapped
// (with fmt.Errorf, or next to a context error) and joined with each other
// error, the answer they gave before their table was written over
// internal/outcome. The answers below were recorded from the classifier
// that matched each sentinel in its own switch, but for one: Param's error
// for a request not routed (KeyNotRouted, an HTTP key's, which no gRPC
// key function returns) matches lockcore.ErrMisconfigured now, and is
// answered as that is, Internal whatever it is joined with.
func TestCodeOfEveryError(t *testing.T) {
	var got strings.Builder
	got.WriteString("\n")
	line := func(name string, err error) {
		code, msg, retry := rpcAnswer(err)
		fmt.Fprintf(&got, "%s: %d %s %s\n", name, code, retry, msg)
	}
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
	if g := got.String(); g != codeSingles {
		t.Errorf("answers changed; now:\n%s", g)
	}

	// Each ordered pair, joined: a cell is the code's number, then the
	// message as a letter of codeMessages, then r if the status carries
	// a RetryInfo.
	got.Reset()
	got.WriteString("\n")
	msgs := strings.Split(strings.TrimSpace(codeMessages), "\n")
	for _, a := range classifyAtoms {
		row := fmt.Sprintf("%-13s", a.name)
		for _, b := range classifyAtoms {
			code, msg, retry := rpcAnswer(errors.Join(a.err, b.err))
			tag := "?"
			for i, m := range msgs {
				if m == msg {
					tag = string(rune('a' + i))
				}
			}
			if tag == "?" {
				t.Errorf("Join(%s, %s): message %q not in codeMessages", a.name, b.name, msg)
			}
			r := ""
			if retry != "-" {
				r = "r"
			}
			row += fmt.Sprintf(" %2d%s%-1s", code, tag, r)
		}
		got.WriteString(strings.TrimRight(row, " ") + "\n")
	}
	if g := got.String(); g != codePairs {
		t.Errorf("answers to joined pairs changed; now:\n%s", g)
	}
}

// codeMessages are the messages Status gives, one a line, lettered a, b, …
// in codePairs.
const codeMessages = `
routelock: resource busy, retry later
routelock: lock service misconfigured
routelock: invalid lock key
routelock: invalid routelock-token metadata
routelock: call cancelled while waiting for the lock
routelock: deadline exceeded while waiting for the lock
routelock: internal error
routelock: invalid lock key: Param(id): missing
routelock: invalid lock key: JSON(id): request body too large
routelock: lock service unavailable
routelock: lock key: Param(id): request not routed
routelock: lock key: Custom: invalid
routelock: lock key: Param(id): missing
routelock: lock key: JSON(id): request body too large
routelock: invalid lock key: Param(id): request not routed
routelock: invalid lock key: Custom: invalid
`

// codeSingles are the answers of Status to single errors: code, RetryInfo
// delay, message.
const codeSingles = `
nil: 13 - routelock: internal error
NotAcquired: 10 - routelock: resource busy, retry later
WaitTimeout: 10 - routelock: resource busy, retry later
Busy: 10 2.5s routelock: resource busy, retry later
TimedOut: 10 300ms routelock: resource busy, retry later
LockLost: 13 - routelock: internal error
Revoked: 13 - routelock: internal error
Unavailable: 14 - routelock: lock service unavailable
Misconfigured: 13 - routelock: lock service misconfigured
InvalidKey: 3 - routelock: invalid lock key
InvalidToken: 3 - routelock: invalid routelock-token metadata
Released: 13 - routelock: internal error
Closed: 14 - routelock: lock service unavailable
NotHeld: 13 - routelock: internal error
Canceled: 1 - routelock: call cancelled while waiting for the lock
Deadline: 4 - routelock: deadline exceeded while waiting for the lock
Skip: 13 - routelock: internal error
Missing: 3 - routelock: invalid lock key
Invalid: 3 - routelock: invalid lock key
TooLarge: 3 - routelock: invalid lock key
KeyMissing: 3 - routelock: invalid lock key: Param(id): missing
KeyTooLarge: 3 - routelock: invalid lock key: JSON(id): request body too large
KeyNotRouted: 13 - routelock: lock key: Param(id): request not routed
KeyCustom: 13 - routelock: lock key: Custom: invalid
NoRoute: 13 - routelock: internal error
Other: 13 - routelock: internal error
wrapped NotAcquired: 10 - routelock: resource busy, retry later
twice wrapped NotAcquired: 10 - routelock: resource busy, retry later
NotAcquired with Canceled: 1 - routelock: call cancelled while waiting for the lock
NotAcquired with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped WaitTimeout: 10 - routelock: resource busy, retry later
twice wrapped WaitTimeout: 10 - routelock: resource busy, retry later
WaitTimeout with Canceled: 1 - routelock: call cancelled while waiting for the lock
WaitTimeout with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped Busy: 10 2.5s routelock: resource busy, retry later
twice wrapped Busy: 10 2.5s routelock: resource busy, retry later
Busy with Canceled: 1 - routelock: call cancelled while waiting for the lock
Busy with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped TimedOut: 10 300ms routelock: resource busy, retry later
twice wrapped TimedOut: 10 300ms routelock: resource busy, retry later
TimedOut with Canceled: 1 - routelock: call cancelled while waiting for the lock
TimedOut with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped LockLost: 13 - routelock: internal error
twice wrapped LockLost: 13 - routelock: internal error
LockLost with Canceled: 1 - routelock: call cancelled while waiting for the lock
LockLost with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped Revoked: 13 - routelock: internal error
twice wrapped Revoked: 13 - routelock: internal error
Revoked with Canceled: 1 - routelock: call cancelled while waiting for the lock
Revoked with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped Unavailable: 14 - routelock: lock service unavailable
twice wrapped Unavailable: 14 - routelock: lock service unavailable
Unavailable with Canceled: 1 - routelock: call cancelled while waiting for the lock
Unavailable with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped Misconfigured: 13 - routelock: lock service misconfigured
twice wrapped Misconfigured: 13 - routelock: lock service misconfigured
Misconfigured with Canceled: 13 - routelock: lock service misconfigured
Misconfigured with Deadline: 13 - routelock: lock service misconfigured
wrapped InvalidKey: 3 - routelock: invalid lock key
twice wrapped InvalidKey: 3 - routelock: invalid lock key
InvalidKey with Canceled: 3 - routelock: invalid lock key
InvalidKey with Deadline: 3 - routelock: invalid lock key
wrapped InvalidToken: 3 - routelock: invalid routelock-token metadata
twice wrapped InvalidToken: 3 - routelock: invalid routelock-token metadata
InvalidToken with Canceled: 3 - routelock: invalid routelock-token metadata
InvalidToken with Deadline: 3 - routelock: invalid routelock-token metadata
wrapped Released: 13 - routelock: internal error
twice wrapped Released: 13 - routelock: internal error
Released with Canceled: 1 - routelock: call cancelled while waiting for the lock
Released with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped Closed: 14 - routelock: lock service unavailable
twice wrapped Closed: 14 - routelock: lock service unavailable
Closed with Canceled: 1 - routelock: call cancelled while waiting for the lock
Closed with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped NotHeld: 13 - routelock: internal error
twice wrapped NotHeld: 13 - routelock: internal error
NotHeld with Canceled: 1 - routelock: call cancelled while waiting for the lock
NotHeld with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped Canceled: 1 - routelock: call cancelled while waiting for the lock
twice wrapped Canceled: 1 - routelock: call cancelled while waiting for the lock
Canceled with Canceled: 1 - routelock: call cancelled while waiting for the lock
Canceled with Deadline: 1 - routelock: call cancelled while waiting for the lock
wrapped Deadline: 4 - routelock: deadline exceeded while waiting for the lock
twice wrapped Deadline: 4 - routelock: deadline exceeded while waiting for the lock
Deadline with Canceled: 1 - routelock: call cancelled while waiting for the lock
Deadline with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped Skip: 13 - routelock: internal error
twice wrapped Skip: 13 - routelock: internal error
Skip with Canceled: 13 - routelock: internal error
Skip with Deadline: 13 - routelock: internal error
wrapped Missing: 3 - routelock: invalid lock key
twice wrapped Missing: 3 - routelock: invalid lock key
Missing with Canceled: 3 - routelock: invalid lock key
Missing with Deadline: 3 - routelock: invalid lock key
wrapped Invalid: 3 - routelock: invalid lock key
twice wrapped Invalid: 3 - routelock: invalid lock key
Invalid with Canceled: 3 - routelock: invalid lock key
Invalid with Deadline: 3 - routelock: invalid lock key
wrapped TooLarge: 3 - routelock: invalid lock key
twice wrapped TooLarge: 3 - routelock: invalid lock key
TooLarge with Canceled: 3 - routelock: invalid lock key
TooLarge with Deadline: 3 - routelock: invalid lock key
wrapped KeyMissing: 3 - routelock: invalid lock key: Param(id): missing
twice wrapped KeyMissing: 3 - routelock: invalid lock key: Param(id): missing
KeyMissing with Canceled: 3 - routelock: invalid lock key: Param(id): missing
KeyMissing with Deadline: 3 - routelock: invalid lock key: Param(id): missing
wrapped KeyTooLarge: 3 - routelock: invalid lock key: JSON(id): request body too large
twice wrapped KeyTooLarge: 3 - routelock: invalid lock key: JSON(id): request body too large
KeyTooLarge with Canceled: 3 - routelock: invalid lock key: JSON(id): request body too large
KeyTooLarge with Deadline: 3 - routelock: invalid lock key: JSON(id): request body too large
wrapped KeyNotRouted: 13 - routelock: lock key: Param(id): request not routed
twice wrapped KeyNotRouted: 13 - routelock: lock key: Param(id): request not routed
KeyNotRouted with Canceled: 13 - routelock: lock key: Param(id): request not routed
KeyNotRouted with Deadline: 13 - routelock: lock key: Param(id): request not routed
wrapped KeyCustom: 13 - routelock: lock key: Custom: invalid
twice wrapped KeyCustom: 13 - routelock: lock key: Custom: invalid
KeyCustom with Canceled: 1 - routelock: call cancelled while waiting for the lock
KeyCustom with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped NoRoute: 13 - routelock: internal error
twice wrapped NoRoute: 13 - routelock: internal error
NoRoute with Canceled: 1 - routelock: call cancelled while waiting for the lock
NoRoute with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
wrapped Other: 13 - routelock: internal error
twice wrapped Other: 13 - routelock: internal error
Other with Canceled: 1 - routelock: call cancelled while waiting for the lock
Other with Deadline: 4 - routelock: deadline exceeded while waiting for the lock
`

// codePairs are the answers of Status to errors.Join(row, column), the
// columns in the order of the rows (classifyAtoms); the codes by number
// (1 Canceled, 3 InvalidArgument, 4 DeadlineExceeded, 10 Aborted,
// 13 Internal, 14 Unavailable).
const codePairs = `
NotAcquired   10a  10a  10ar 10ar 10a  10a  10a  13b   3c   3d  10a  10a  10a   1e   4f  13g   3c   3c   3c   3h   3i  13k  10a  10a  10a
WaitTimeout   10a  10a  10ar 10ar 10a  10a  10a  13b   3c   3d  10a  10a  10a   1e   4f  13g   3c   3c   3c   3h   3i  13k  10a  10a  10a
Busy          10ar 10ar 10ar 10ar 10ar 10ar 10ar 13b   3c   3d  10ar 10ar 10ar  1e   4f  13g   3c   3c   3c   3h   3i  13k  10ar 10ar 10ar
TimedOut      10ar 10ar 10ar 10ar 10ar 10ar 10ar 13b   3c   3d  10ar 10ar 10ar  1e   4f  13g   3c   3c   3c   3h   3i  13k  10ar 10ar 10ar
LockLost      10a  10a  10ar 10ar 13g  13g  14j  13b   3c   3d  13g  14j  13g   1e   4f  13g   3c   3c   3c   3h   3i  13k  13l  13g  13g
Revoked       10a  10a  10ar 10ar 13g  13g  14j  13b   3c   3d  13g  14j  13g   1e   4f  13g   3c   3c   3c   3h   3i  13k  13l  13g  13g
Unavailable   10a  10a  10ar 10ar 14j  14j  14j  13b   3c   3d  14j  14j  14j   1e   4f  13g   3c   3c   3c   3h   3i  13k  14j  14j  14j
Misconfigured 13b  13b  13b  13b  13b  13b  13b  13b  13b  13b  13b  13b  13b  13b  13b  13b  13b  13b  13b  13m  13n  13k  13l  13b  13b
InvalidKey     3c   3c   3c   3c   3c   3c   3c  13b   3c   3d   3c   3c   3c   3c   3c  13g   3c   3c   3c   3h   3i  13k   3p   3c   3c
InvalidToken   3d   3d   3d   3d   3d   3d   3d  13b   3d   3d   3d   3d   3d   3d   3d  13g   3d   3d   3d   3h   3i  13k   3p   3d   3d
Released      10a  10a  10ar 10ar 13g  13g  14j  13b   3c   3d  13g  14j  13g   1e   4f  13g   3c   3c   3c   3h   3i  13k  13l  13g  13g
Closed        10a  10a  10ar 10ar 14j  14j  14j  13b   3c   3d  14j  14j  14j   1e   4f  13g   3c   3c   3c   3h   3i  13k  14j  14j  14j
NotHeld       10a  10a  10ar 10ar 13g  13g  14j  13b   3c   3d  13g  14j  13g   1e   4f  13g   3c   3c   3c   3h   3i  13k  13l  13g  13g
Canceled       1e   1e   1e   1e   1e   1e   1e  13b   3c   3d   1e   1e   1e   1e   1e  13g   3c   3c   3c   3h   3i  13k   1e   1e   1e
Deadline       4f   4f   4f   4f   4f   4f   4f  13b   3c   3d   4f   4f   4f   1e   4f  13g   3c   3c   3c   3h   3i  13k   4f   4f   4f
Skip          13g  13g  13g  13g  13g  13g  13g  13b  13g  13g  13g  13g  13g  13g  13g  13g  13g  13g  13g  13m  13n  13k  13l  13g  13g
Missing        3c   3c   3c   3c   3c   3c   3c  13b   3c   3d   3c   3c   3c   3c   3c  13g   3c   3c   3c   3h   3i  13k   3p   3c   3c
Invalid        3c   3c   3c   3c   3c   3c   3c  13b   3c   3d   3c   3c   3c   3c   3c  13g   3c   3c   3c   3h   3i  13k   3p   3c   3c
TooLarge       3c   3c   3c   3c   3c   3c   3c  13b   3c   3d   3c   3c   3c   3c   3c  13g   3c   3c   3c   3h   3i  13k   3p   3c   3c
KeyMissing     3h   3h   3h   3h   3h   3h   3h  13m   3h   3h   3h   3h   3h   3h   3h  13m   3h   3h   3h   3h   3h  13m   3h   3h   3h
KeyTooLarge    3i   3i   3i   3i   3i   3i   3i  13n   3i   3i   3i   3i   3i   3i   3i  13n   3i   3i   3i   3i   3i  13n   3i   3i   3i
KeyNotRouted  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k  13k
KeyCustom     10a  10a  10ar 10ar 13l  13l  14j  13l   3p   3p  13l  14j  13l   1e   4f  13l   3p   3p   3p   3p   3p  13l  13l  13l  13l
NoRoute       10a  10a  10ar 10ar 13g  13g  14j  13b   3c   3d  13g  14j  13g   1e   4f  13g   3c   3c   3c   3h   3i  13k  13l  13g  13g
Other         10a  10a  10ar 10ar 13g  13g  14j  13b   3c   3d  13g  14j  13g   1e   4f  13g   3c   3c   3c   3h   3i  13k  13l  13g  13g
`
