package interceptor

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// Code returns the gRPC code for an error of the interceptors:
//
//	InvalidArgument   key missing or invalid, malformed owner token
//	Aborted           lock held by another owner (fail fast, or the wait ran out)
//	Unavailable       the engine (Redis) unreachable, or closed
//	Canceled          the caller went away while waiting
//	DeadlineExceeded  the call's deadline passed while waiting
//	Internal          the engine set up wrongly (lockcore.ErrMisconfigured),
//	                  and anything else, e.g. an exact rule whose key does
//	                  not apply to its method (keyfunc.ErrSkip)
func Code(err error) codes.Code {
	switch {
	case errors.Is(err, keyfunc.ErrSkip), errors.Is(err, lockcore.ErrMisconfigured):
		return codes.Internal
	case errors.Is(err, keyfunc.ErrMissing), errors.Is(err, keyfunc.ErrInvalid),
		errors.Is(err, keyfunc.ErrTooLarge), errors.Is(err, lockcore.ErrInvalidKey),
		errors.Is(err, lockcore.ErrInvalidToken):
		return codes.InvalidArgument
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, lockcore.ErrNotAcquired):
		return codes.Aborted
	case errors.Is(err, lockcore.ErrUnavailable), errors.Is(err, lockcore.ErrClosed):
		return codes.Unavailable
	}
	return codes.Internal
}

// Status is the default Rule.OnError: a status error with Code(err) and a
// message that names what is wrong without repeating the call's values,
// Redis errors, keys or owner tokens. An Aborted status carries a
// google.rpc.RetryInfo detail with the engine's estimate of when the lock
// is free (lockcore.ContentionError.RetryAfter).
func Status(err error) error {
	code := Code(err)
	msg := "routelock: internal error"
	var kerr *keyfunc.Error
	switch code {
	case codes.InvalidArgument:
		msg = "routelock: invalid lock key"
		switch {
		case errors.As(err, &kerr):
			msg += ": " + kerr.Public()
		case errors.Is(err, lockcore.ErrInvalidToken):
			msg = "routelock: invalid " + TokenKey + " metadata"
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
	case codes.Unavailable:
		msg = "routelock: lock service unavailable"
	case codes.Canceled:
		msg = "routelock: call cancelled while waiting for the lock"
	case codes.DeadlineExceeded:
		msg = "routelock: deadline exceeded while waiting for the lock"
	case codes.Internal:
		switch {
		case errors.As(err, &kerr):
			msg = "routelock: lock key: " + kerr.Public()
		case errors.Is(err, lockcore.ErrMisconfigured):
			msg = "routelock: lock service misconfigured"
		}
	}
	return status.Error(code, msg)
}
