package interceptor

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/routelock/lock/internal/outcome"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// keyErrors are the sentinels of the key functions that Status tells apart
// from lockcore's, with the kinds they report. The other errors of key
// functions match lockcore's sentinels: keyfunc.ErrMissing and
// keyfunc.ErrTooLarge match lockcore.ErrInvalidKey.
var keyErrors = []outcome.Sentinel{
	{Err: keyfunc.ErrSkip, Kind: outcome.NotApplicable},
}

// codeTable is Status's table of codes. Its order decides for an error of several
// kinds and is kept as it was: a key that does not apply or a
// misconfigured engine first, then an invalid key (a body too large
// included) or token, then the
// call's context (cancelled, then its deadline) before a busy lock, an
// upgrade or a closed gate, and an
// unavailable or closed engine: a wait cut short by the caller is
// answered as the caller's cancellation, not as the wait's result.
var codeTable = []outcome.Row[codes.Code]{
	{Kinds: outcome.NotApplicable | outcome.Misconfigured, To: codes.Internal},
	{Kinds: outcome.InvalidKey | outcome.InvalidToken, To: codes.InvalidArgument},
	{Kinds: outcome.Canceled, To: codes.Canceled},
	{Kinds: outcome.DeadlineExceeded, To: codes.DeadlineExceeded},
	{Kinds: outcome.Busy, To: codes.Aborted},
	{Kinds: outcome.Upgrade | outcome.GateClosed, To: codes.FailedPrecondition},
	{Kinds: outcome.Unavailable | outcome.Closed, To: codes.Unavailable},
}

// Status is the default Config.OnError: a status error with the code of
// err (status.Code reads it),
//
//	InvalidArgument   key missing or invalid, malformed owner token
//	Aborted           lock held by another owner (fail fast, or the wait ran out)
//	FailedPrecondition  an exclusive lock asked for by a call that holds it
//	                  shared (lockcore.ErrUpgrade): no retry helps; or the
//	                  resource's gate is closed, sold out
//	                  (lockcore.ErrGateClosed), with a google.rpc.ErrorInfo
//	                  detail of reason "SOLD_OUT", domain "routelock"
//	Unavailable       the engine (Redis) unreachable, or closed
//	Canceled          the caller went away while waiting
//	DeadlineExceeded  the call's deadline passed while waiting
//	Internal          the engine set up wrongly (lockcore.ErrMisconfigured),
//	                  and anything else, e.g. an exact rule whose key does
//	                  not apply to its method (keyfunc.ErrSkip: the message
//	                  says the method's lock configuration is wrong; Check
//	                  finds such a rule at startup)
//
// and a
// message that names what is wrong without repeating the call's values,
// Redis errors, keys or owner tokens: for an error of a key function, what
// its method Public() string returns (see keyfunc.ErrSkip). An Aborted status carries a
// google.rpc.RetryInfo detail with the engine's estimate of when the lock
// is free (lockcore.ContentionError.RetryAfter); an Unavailable status
// while the engine's restart guard refuses fresh holds
// (lockcore.ErrRestartGuard) says so, with a RetryInfo of the guard's time
// left.
func Status(err error) error {
	k := outcome.Of(err, keyErrors...)
	code := outcome.First(k, codeTable, codes.Internal)
	msg := "routelock: internal error"
	var kerr interface{ Public() string } // an error of a key function
	switch code {
	case codes.InvalidArgument:
		msg = "routelock: invalid lock key"
		switch {
		case errors.As(err, &kerr):
			msg += ": " + kerr.Public()
		case k.Has(outcome.InvalidToken):
			msg = "routelock: invalid " + tokenKey + " metadata"
		}
	case codes.Aborted:
		st := status.New(code, "routelock: resource busy, retry later")
		var cerr *lockcore.ContentionError
		if errors.As(err, &cerr) && cerr.RetryAfter > 0 {
			if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(cerr.RetryAfter)}); derr == nil {
				st = d
			}
		}
		return st.Err()
	case codes.FailedPrecondition:
		if k.Has(outcome.GateClosed) {
			st := status.New(code, "routelock: sold out")
			if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: "SOLD_OUT", Domain: "routelock"}); derr == nil {
				st = d
			}
			return st.Err()
		}
		msg = "routelock: the call holds this lock shared and cannot take it exclusively"
	case codes.Unavailable:
		var gerr *lockcore.RestartGuardError
		if errors.As(err, &gerr) {
			st := status.New(code, "routelock: lock service restarted without its data: no lock is taken until every earlier lease has ended")
			if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(gerr.RetryAfter)}); derr == nil {
				st = d
			}
			return st.Err()
		}
		msg = "routelock: lock service unavailable"
	case codes.Canceled:
		msg = "routelock: call cancelled while waiting for the lock"
	case codes.DeadlineExceeded:
		msg = "routelock: deadline exceeded while waiting for the lock"
	case codes.Internal:
		switch {
		case k.Has(outcome.NotApplicable) && skipped(err, &kerr):
			// A rule that names the method exactly, with a key the
			// method's request does not have: the server's fault.
			msg = "routelock: the lock configuration of this method is wrong: its key " + kerr.Public()
		case errors.As(err, &kerr):
			msg = "routelock: lock key: " + kerr.Public()
		case k.Has(outcome.Misconfigured):
			msg = "routelock: lock service misconfigured"
		}
	}
	return status.Error(code, msg)
}

// skipped finds in err's tree the error of a key function that does not
// apply to the call (keyfunc.ErrSkip) and has a method Public() string,
// and sets *kerr to it.
func skipped(err error, kerr *interface{ Public() string }) bool {
	if p, ok := err.(interface{ Public() string }); ok && errors.Is(err, keyfunc.ErrSkip) {
		*kerr = p
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			return skipped(e, kerr)
		}
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if skipped(e, kerr) {
				return true
			}
		}
	}
	return false
}
