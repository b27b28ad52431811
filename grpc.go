package lock

import (
	"google.golang.org/grpc"

	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/keyfunc"
)

// MethodRule says what one gRPC method (or a service's methods, or all)
// locks; make one with Method and give it to the Locker's server
// interceptors.
type MethodRule struct {
	method string
	key    keyfunc.Func
	opts   []Option
}

// Method returns the rule of the gRPC method fullMethod, such as
// "/shop.Inventory/Reserve": its calls lock the resource key names, with
// opts (Wait, FailFast, TTL, Name, OnRPCError) over the Locker's defaults.
// fullMethod may also be "/shop.Inventory/*", every method of the service,
// or "*", every method; an exact rule wins over its service's, which wins
// over "*". Where the key of a wildcard rule does not apply to a method
// (keyfunc.Field of a field that its request message lacks), the method's
// calls pass through unlocked.
//
//	lock.Method("/shop.Inventory/Reserve", keyfunc.Field("product_id"), lock.Name("productID"), lock.Wait(time.Second))
//
// Name("productID") makes the method share the lock of HTTP routes on
// {productID}: the key is productID:42 on both, and the owner token carried
// between them re-enters it.
//
// Panics if fullMethod is malformed, key is zero or cannot read gRPC calls
// (keyfunc.Param and other HTTP-only functions), or an option is invalid
// here.
func Method(fullMethod string, key keyfunc.Func, opts ...Option) MethodRule {
	var c config
	c.applyAll(inMethod, opts)
	if c.name != "" && !key.IsZero() {
		key = key.As(c.name)
	}
	if err := (interceptor.Config{Rules: []interceptor.Rule{{Method: fullMethod, Key: key, TTL: c.ttl}}}).Validate(); err != nil {
		panic(err.Error())
	}
	return MethodRule{method: fullMethod, key: key, opts: opts}
}

// rpcConfig returns the interceptor configuration of rules on l.
func (l *Locker) rpcConfig(rules []MethodRule) interceptor.Config {
	ic := interceptor.Config{TrustToken: l.cfg.rpcTrust}
	for _, m := range rules {
		if m.method == "" {
			panic("lock: zero MethodRule")
		}
		c := l.cfg
		c.applyAll(inMethod, m.opts)
		ic.Rules = append(ic.Rules, interceptor.Rule{
			Method:  m.method,
			Key:     m.key,
			Wait:    c.wait,
			TTL:     c.ttl,
			OnError: c.rpcOnError,
		})
	}
	return ic
}

// UnaryServerInterceptor returns a unary server interceptor that locks the
// methods of rules while their handlers run; calls of other methods pass
// through unlocked:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(locker.UnaryServerInterceptor(
//		lock.Method("/shop.Inventory/Reserve", keyfunc.Field("product_id"), lock.Wait(time.Second)),
//		lock.Method("/shop.Orders/Create", keyfunc.Field("order.user_id"), lock.FailFast()),
//	)))
//
// A call with a bad key ends with codes.InvalidArgument, one that finds the
// lock held with codes.Aborted, one that cannot reach Redis with
// codes.Unavailable; the handler does not run. See package interceptor.
//
// Panics if two rules name the same method.
func (l *Locker) UnaryServerInterceptor(rules ...MethodRule) grpc.UnaryServerInterceptor {
	return interceptor.UnaryServer(l.core, l.rpcConfig(rules))
}

// StreamServerInterceptor is UnaryServerInterceptor for streams. A key
// from metadata is locked before the handler runs; a key from the message
// (keyfunc.Field) is locked on the stream's first message, inside the
// handler's first RecvMsg.
func (l *Locker) StreamServerInterceptor(rules ...MethodRule) grpc.StreamServerInterceptor {
	return interceptor.StreamServer(l.core, l.rpcConfig(rules))
}

// UnaryClientInterceptor returns a client interceptor that sends the owner
// tokens of the call's context (those of every live lock it holds) to the
// server, so that a method locking the same resource re-enters the caller's
// lock instead of waiting for it:
//
//	grpc.NewClient(addr, grpc.WithChainUnaryInterceptor(locker.UnaryClientInterceptor()))
//
// Use it only on connections to your own services: the token lets its
// bearer re-enter the caller's locks.
func (l *Locker) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return interceptor.UnaryClient()
}

// StreamClientInterceptor is UnaryClientInterceptor for streams.
func (l *Locker) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return interceptor.StreamClient()
}

// UnaryClientInterceptor is interceptor.UnaryClient: see
// Locker.UnaryClientInterceptor.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor { return interceptor.UnaryClient() }

// StreamClientInterceptor is interceptor.StreamClient.
func StreamClientInterceptor() grpc.StreamClientInterceptor { return interceptor.StreamClient() }
