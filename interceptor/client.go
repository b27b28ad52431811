package interceptor

import (
	"context"

	"github.com/routelock/lock/internal/lifecycle"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// UnaryClient returns a unary client interceptor that sends the owner tokens
// of the call's context (lifecycle.Outbound) in routelock-token metadata, so that a
// server that locks the same resource with this package (or an HTTP service
// with package middleware) re-enters the caller's lock instead of waiting
// for it:
//
//	grpc.NewClient(addr, grpc.WithChainUnaryInterceptor(interceptor.UnaryClient()))
//
// Make the call with the handler's context. A context without a token
// sends none. A token lets its bearer re-enter the caller's lock it belongs
// to while that is held: use the interceptor only on connections to your
// own services.
func UnaryClient() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(outgoing(ctx), method, req, reply, cc, opts...)
	}
}

// StreamClient is UnaryClient for streams.
func StreamClient() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(outgoing(ctx), desc, cc, method, opts...)
	}
}

// outgoing returns ctx with its owner tokens, if any, as the one tokenKey
// entry of its outgoing metadata.
func outgoing(ctx context.Context) context.Context {
	tok := lifecycle.Outbound(ctx)
	if tok == "" {
		return ctx
	}
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		return metadata.AppendToOutgoingContext(ctx, tokenKey, tok)
	}
	if vs := md[tokenKey]; len(vs) == 1 && vs[0] == tok {
		return ctx
	}
	md.Set(tokenKey, tok) // md is a copy
	return metadata.NewOutgoingContext(ctx, md)
}
