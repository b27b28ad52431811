// Package grpclock is the gRPC face of package lock: server interceptors
// that hold a lock while a method's handler runs, the rules that say what
// each method locks, and client interceptors that pass a call's owner
// tokens on to the services it calls. It lives apart from package lock so
// that a program that serves only HTTP links no gRPC.
//
//	locker := lock.New(rdb)
//	grpc.NewServer(grpc.ChainUnaryInterceptor(grpclock.UnaryServerInterceptor(locker,
//		grpclock.Method("/shop.Inventory/Reserve", interceptor.Field("product_id"), lock.Wait(time.Second)),
//		grpclock.Method("/shop.Orders/Create", interceptor.Field("order.user_id"), lock.FailFast()),
//	)))
//	grpc.NewClient(addr, grpc.WithChainUnaryInterceptor(grpclock.UnaryClientInterceptor()))
//
// See package interceptor for the flow of a call, and package lock for the
// options.
package grpclock

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/config"
	"github.com/routelock/lock/keyfunc"
)

// MethodRule says what one gRPC method (or a service's methods, or all)
// locks; make one with Method and give it to the server interceptors.
type MethodRule struct {
	method string
	key    keyfunc.Func
	opts   []lock.Option
}

// Method returns the rule of the gRPC method fullMethod, such as
// "/shop.Inventory/Reserve": its calls lock the resource key names, with
// opts (lock.Wait, lock.FailFast, lock.TTL, lock.Name, OnRPCError) over the
// Locker's defaults. fullMethod may also be "/shop.Inventory/*", every
// method of the service, or "*", every method; an exact rule wins over its
// service's, which wins over "*". Where the key of a wildcard rule does not
// apply to a method (interceptor.Field of a field that its request message
// lacks), the method's calls pass through unlocked.
//
//	grpclock.Method("/shop.Inventory/Reserve", interceptor.Field("product_id"), lock.Name("productID"), lock.Wait(time.Second))
//
// lock.Name("productID") makes the method share the lock of HTTP routes on
// {productID}: the key is productID:42 on both, and the owner token carried
// between them re-enters it.
//
// Panics if fullMethod is malformed, key is zero or cannot read gRPC calls
// (keyfunc.Param and other HTTP-only functions), or an option is invalid
// here.
func Method(fullMethod string, key keyfunc.Func, opts ...lock.Option) MethodRule {
	var c config.Config
	c.ApplyAll(config.InMethod, opts)
	if c.Name != "" && key.ForRPC() { // otherwise Validate refuses key below
		key = key.As(c.Name)
	}
	if err := (interceptor.Config{Rules: []interceptor.Rule{{Method: fullMethod, Key: key, TTL: c.TTL}}}).Validate(); err != nil {
		panic(err.Error())
	}
	return MethodRule{method: fullMethod, key: key, opts: opts}
}

// TrustRPCToken decides which gRPC calls may carry propagated owner tokens
// (the routelock-token metadata that UnaryClientInterceptor writes), as
// lock.TrustToken does for HTTP requests. Give it to lock.New or
// lock.FromEngine; it applies to all methods of the Locker's server
// interceptors. The default trusts every call, which is safe against
// made-up tokens (a token only re-enters the live hold it was minted for).
//
// Panics if trust is nil.
func TrustRPCToken(trust func(ctx context.Context, fullMethod string) bool) lock.Option {
	if trust == nil {
		panic("grpclock: TrustRPCToken(nil)")
	}
	return config.New("TrustRPCToken", config.InNew, func(c *config.Config) { c.RPCTrust = trust })
}

// OnRPCError replaces the error a refused gRPC call ends with, as
// lock.OnError does for HTTP. Give it to lock.New for every method, or to
// Method for one. The default is interceptor.Status; interceptor.Code maps
// err to the default code.
//
// Panics if fn is nil.
func OnRPCError(fn func(ctx context.Context, fullMethod string, err error) error) lock.Option {
	if fn == nil {
		panic("grpclock: OnRPCError(nil)")
	}
	return config.New("OnRPCError", config.InNew|config.InMethod, func(c *config.Config) { c.RPCOnError = fn })
}

// serverConfig returns the interceptor configuration of rules on l.
func serverConfig(l *lock.Locker, rules []MethodRule) interceptor.Config {
	if l == nil {
		panic("grpclock: nil Locker")
	}
	var base config.Config
	base.ApplyAll(config.Anywhere, l.Options())
	ic := interceptor.Config{TrustToken: base.RPCTrust, Logger: base.Logger}
	for _, m := range rules {
		if m.method == "" {
			panic("grpclock: zero MethodRule")
		}
		c := base
		c.ApplyAll(config.InMethod, m.opts)
		ic.Rules = append(ic.Rules, interceptor.Rule{
			Method:  m.method,
			Key:     m.key,
			Wait:    c.Wait,
			TTL:     c.TTL,
			OnError: c.RPCOnError,
		})
	}
	return ic
}

// UnaryServerInterceptor returns a unary server interceptor that locks the
// methods of rules with l's engine while their handlers run; calls of other
// methods pass through unlocked (still carrying a propagated owner token
// on).
//
// A call with a bad key ends with codes.InvalidArgument, one that finds the
// lock held with codes.Aborted, one that cannot reach Redis with
// codes.Unavailable; the handler does not run. The handler's context is
// cancelled with cause lock.ErrLockLost if the lease is lost. See package
// interceptor.
//
// Panics if l is nil, or two rules name the same method.
func UnaryServerInterceptor(l *lock.Locker, rules ...MethodRule) grpc.UnaryServerInterceptor {
	return interceptor.UnaryServer(l.Engine(), serverConfig(l, rules))
}

// StreamServerInterceptor is UnaryServerInterceptor for streams. A key
// from metadata is locked before the handler runs; a key from the message
// (interceptor.Field) is locked on the stream's first message, inside the
// handler's first RecvMsg.
func StreamServerInterceptor(l *lock.Locker, rules ...MethodRule) grpc.StreamServerInterceptor {
	return interceptor.StreamServer(l.Engine(), serverConfig(l, rules))
}

// UnaryClientInterceptor returns a client interceptor that sends the owner
// tokens of the call's context (those of every live lock it holds) to the
// server, so that a method locking the same resource re-enters the caller's
// lock instead of waiting for it:
//
//	grpc.NewClient(addr, grpc.WithChainUnaryInterceptor(grpclock.UnaryClientInterceptor()))
//
// Use it only on connections to your own services: a token lets its bearer
// re-enter the caller's lock it belongs to while that is held.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor { return interceptor.UnaryClient() }

// StreamClientInterceptor is UnaryClientInterceptor for streams.
func StreamClientInterceptor() grpc.StreamClientInterceptor { return interceptor.StreamClient() }

// Check returns an error matching lock.ErrMisconfigured that names every
// rule matching no method registered on s, such as a misspelt method name,
// whose calls would otherwise run unlocked without a word; nil when every
// rule matches. Call it at startup, after registering the services:
//
//	rules := []grpclock.MethodRule{grpclock.Method("/shop.Inventory/Reserve", interceptor.Field("product_id"))}
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclock.UnaryServerInterceptor(locker, rules...)))
//	shop.RegisterInventoryServer(srv, inv)
//	if err := grpclock.Check(srv, rules...); err != nil {
//		log.Fatal(err)
//	}
func Check(s *grpc.Server, rules ...MethodRule) error {
	services := s.GetServiceInfo()
	var unmatched []string
	for _, r := range rules {
		if !matches(services, r.method) {
			unmatched = append(unmatched, r.method)
		}
	}
	if len(unmatched) == 0 {
		return nil
	}
	return fmt.Errorf("%w: grpclock: rules that match no registered method: %s", lock.ErrMisconfigured, strings.Join(unmatched, ", "))
}

// matches reports whether rule method m ("*", "/pkg.Service/*" or
// "/pkg.Service/Method") names a method of services.
func matches(services map[string]grpc.ServiceInfo, m string) bool {
	if m == "*" {
		return len(services) > 0
	}
	svc, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	info, found := services[svc]
	if !ok || !found {
		return false
	}
	if method == "*" {
		return len(info.Methods) > 0
	}
	for _, mi := range info.Methods {
		if mi.Name == method {
			return true
		}
	}
	return false
}
