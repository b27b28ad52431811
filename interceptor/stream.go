package interceptor

import (
	"context"

	"github.com/routelock/lock/internal/lifecycle"
	"google.golang.org/grpc"
)

// StreamServer returns a stream server interceptor that holds the lock of
// the rule matching each stream while its handler runs, as UnaryServer does
// for unary calls.
//
// A key that reads only metadata or the context is known when the stream
// opens: the lock is taken before the handler runs, and a refused stream
// ends with the error before it. A key that reads the request message
// (Field) is taken from the stream's first message: the handler's
// first RecvMsg returns once the lock is held, or returns the refusal,
// which is also the error the stream ends with whatever the handler
// returns. Until then the stream's context carries neither the lock's owner
// token nor a fencing token.
//
// Panics if c is invalid, as UnaryServer does.
func StreamServer(l lifecycle.Locker, c Config) grpc.StreamServerInterceptor {
	s := newServer(l, c)
	return s.stream
}

func (s *server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	r := s.match(info.FullMethod)
	tctx, err := s.withToken(ctx, info.FullMethod)
	if r == nil {
		return handler(srv, withContext(ss, tctx))
	}
	if err != nil {
		return r.onError(ctx, info.FullMethod, err)
	}
	if !r.stream {
		lease, rest, err := s.lock(tctx, r, info.FullMethod, nil)
		switch {
		case err != nil:
			return r.onError(ctx, info.FullMethod, err)
		case lease == nil:
			return handler(srv, withContext(ss, tctx))
		}
		defer release(tctx, lease, rest)
		return handler(srv, withContext(ss, lease.Context()))
	}

	// The key is in the first message: lock inside the handler's first
	// RecvMsg. The handler gets its context now: an ordinary context whose
	// hold slot is filled in once the lock is held, and which a lost lease
	// cancels with the lease's cause.
	base, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	hctx, fill := lifecycle.WithHoldSlot(base)
	fs := &firstStream{ServerStream: ss, s: s, r: r, method: info.FullMethod,
		base: base, ctx: hctx, fill: fill, cancel: cancel}
	defer fs.release()
	err = handler(srv, fs)
	if fs.err != nil {
		return fs.err
	}
	return err
}

// withContext returns ss with ctx as its context.
func withContext(ss grpc.ServerStream, ctx context.Context) grpc.ServerStream {
	if ctx == ss.Context() {
		return ss
	}
	return &ctxStream{ServerStream: ss, ctx: ctx}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

// firstStream locks on the first message its handler receives.
type firstStream struct {
	grpc.ServerStream
	s      *server
	r      *rule
	method string
	base   context.Context // the lock is taken with it
	ctx    context.Context // the handler's: base with a hold slot
	fill   func(*lifecycle.Lease)
	cancel context.CancelCauseFunc

	received bool // RecvMsg is not called concurrently (grpc.ServerStream)
	err      error
	lease    *lifecycle.Lease
	rest     []*lifecycle.Lease // the other leases of a key with several resources
	stop     func() bool
}

func (fs *firstStream) Context() context.Context { return fs.ctx }

func (fs *firstStream) RecvMsg(m any) error {
	if fs.err != nil {
		return fs.err
	}
	if err := fs.ServerStream.RecvMsg(m); err != nil || fs.received {
		return err
	}
	fs.received = true
	lease, rest, err := fs.s.lock(fs.base, fs.r, fs.method, m)
	switch {
	case err != nil:
		fs.err = fs.r.onError(fs.base, fs.method, err)
		return fs.err
	case lease == nil:
		return nil
	}
	fs.lease, fs.rest = lease, rest
	fs.fill(lease)
	// A lost lease cancels the handler's context with the lease's cause.
	lctx := lease.Context()
	fs.stop = context.AfterFunc(lctx, func() { fs.cancel(context.Cause(lctx)) })
	return nil
}

func (fs *firstStream) release() {
	if fs.lease == nil {
		return
	}
	fs.stop()
	release(fs.base, fs.lease, fs.rest)
}
