package lockotel_test

// Telemetry of gRPC calls through a real server on loopback with package interceptor's
// interceptors, on the in-memory engine.

import (
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore/locktest"
)

// tracedRPC is a unary server interceptor that serves each call in a span
// of its own, named by the method, and reports it on r.served once ended.
func (r *rig) tracedRPC(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, span := r.tp.Tracer("test").Start(ctx, info.FullMethod)
	defer func() {
		span.End()
		r.served <- span.SpanContext()
	}()
	return h(ctx, req)
}

// TestGRPC: Reserve (fail fast) and Create (waiting) lock productID on a
// real gRPC server. A call that takes the lock has its lock.acquire and
// lock.release under its own span, which its handler's context keeps, with
// the method as lock.route; a fail-fast call that finds it held is Aborted
// (busy); a waiting call whose deadline passes is DeadlineExceeded
// (cancelled).
func TestGRPC(t *testing.T) {
	r := newRig(t)
	fe := &locktest.Engine{Events: r.tel.Events()}
	locker := lock.FromEngine(fe, lock.Observe(r.tel))
	entered := make(chan trace.SpanContext, 4)
	proceed := make(chan struct{})
	srv := &shop.Server{
		Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			entered <- trace.SpanFromContext(ctx).SpanContext()
			if shop.Int(req, "quantity") > 1 { // hold until told
				select {
				case <-proceed:
				case <-ctx.Done():
					return nil, status.FromContextError(ctx.Err()).Err()
				}
			}
			return shop.New("ReserveReply"), nil
		},
		Create: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			return shop.New("CreateOrderReply"), nil
		},
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(r.tracedRPC, interceptor.UnaryServer(locker, interceptor.Config{Rules: []interceptor.Rule{
		interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"), lock.FailFast()),
		interceptor.Method(shop.Create, interceptor.Field("order.product_id").As("productID")),
	}})))
	shop.Register(s, srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-served
	})
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	reserve := func(ctx context.Context, quantity int32) error {
		req := shop.Set(shop.New("ReserveRequest"), "product_id", int64(42), "quantity", quantity)
		return cc.Invoke(ctx, shop.Reserve, req, shop.New("ReserveReply"))
	}

	// Uncontended.
	if err := reserve(bounded(t), 1); err != nil {
		t.Fatal(err)
	}
	var handlerSpan trace.SpanContext
	select {
	case handlerSpan = <-entered:
	case <-time.After(bound):
		t.Fatal("the handler did not run")
	}
	call := r.wait(t)
	if !handlerSpan.Equal(call) {
		t.Fatal("the handler's current span is not the call's")
	}
	acq := r.only(t, "lock.acquire", call)
	wantAttrs(t, "lock.acquire", acq.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": shop.Reserve, "lock.mode": "fail_fast",
		"lock.outcome": "acquired", "lock.wait": nil, "lock.reentered": false, "lock.fence": int64(1),
	})
	wantAttrs(t, "lock.release", r.only(t, "lock.release", call).Attributes(),
		map[string]any{"lock.resource": "productID", "lock.outcome": "released", "lock.held": nil})

	// Held by a call that runs until told: another Reserve is Aborted, a
	// Create whose deadline passes while it waits is DeadlineExceeded.
	held := make(chan error, 1)
	go func() { held <- reserve(bounded(t), 2) }()
	select {
	case <-entered:
	case <-time.After(bound):
		t.Fatal("the holding handler did not run")
	}
	if err := reserve(bounded(t), 1); status.Code(err) != codes.Aborted {
		t.Fatalf("Reserve while held: %v, want Aborted", err)
	}
	busy := r.only(t, "lock.acquire", r.wait(t))
	wantAttrs(t, "lock.acquire (busy)", busy.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": shop.Reserve, "lock.mode": "fail_fast", "lock.outcome": "busy", "lock.wait": nil,
	})
	ctx, cancel := context.WithTimeout(bounded(t), 100*time.Millisecond)
	defer cancel()
	req := shop.Set(shop.New("CreateOrderRequest"), "order", shop.Set(shop.New("Order"), "user_id", "u1", "product_id", int64(42)))
	if err := cc.Invoke(ctx, shop.Create, req, shop.New("CreateOrderReply")); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Create past its deadline: %v, want DeadlineExceeded", err)
	}
	late := r.only(t, "lock.acquire", r.wait(t))
	wantAttrs(t, "lock.acquire (deadline)", late.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": shop.Create, "lock.mode": "wait", "lock.outcome": "cancelled", "lock.wait": nil,
	})
	proceed <- struct{}{}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	r.wait(t)

	m := r.collect(t)
	m.wantCount(t, "routelock.acquire.duration", 2, "lock.resource", "productID", "lock.route", shop.Reserve, "lock.outcome", "acquired")
	m.wantCount(t, "routelock.acquire.duration", 1, "lock.resource", "productID", "lock.route", shop.Reserve, "lock.outcome", "busy")
	m.wantCount(t, "routelock.acquire.duration", 1, "lock.resource", "productID", "lock.route", shop.Create, "lock.outcome", "cancelled")
	m.wantCount(t, "routelock.hold.duration", 2, "lock.resource", "productID")
	m.wantSum(t, "routelock.held", 0, "lock.resource", "productID")
	m.wantSum(t, "routelock.waiting", 0, "lock.resource", "productID")
}
