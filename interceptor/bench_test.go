package interceptor_test

import (
	"context"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore/redisengine"
)

// benchSetup returns the interceptor for Reserve (keyed by product_id) on
// rdb, and a Reserve request for product 42.
func benchSetup(b *testing.B, rdb *redis.Client) (grpc.UnaryServerInterceptor, *dynamicpb.Message) {
	l, err := redisengine.New(rdb, redisengine.Options{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	ic := interceptor.UnaryServer(lifecycle.Serve(l, nil), interceptor.Config{Rules: []interceptor.Rule{
		{Method: shop.Reserve, Key: interceptor.Field("product_id")},
	}})
	return ic, shop.Set(shop.New("ReserveRequest"), "product_id", int64(42), "quantity", int32(1))
}

var (
	reserveInfo = &grpc.UnaryServerInfo{FullMethod: shop.Reserve}
	reply       = shop.New("ReserveReply")
	handler     = func(ctx context.Context, req any) (any, error) { return reply, nil }
)

// direct runs the handler alone and behind ic, called directly (no gRPC
// transport), as two sub-benchmarks.
func direct(b *testing.B, ic grpc.UnaryServerInterceptor, req any) {
	ctx := context.Background()
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			handler(ctx, req)
		}
	})
	b.Run("locked", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ic(ctx, req, reserveInfo, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkInterceptor measures what the unary interceptor adds to a call
// on an uncontended key, calling it directly (no gRPC transport): the
// handler alone, the handler behind the interceptor on a real Redis, and
// two PINGs, the floor of two round trips.
func BenchmarkInterceptor(b *testing.B) {
	rdb := redistest.Best(b).Client(b)
	ic, req := benchSetup(b, rdb)
	direct(b, ic, req)
	ctx := context.Background()
	b.Run("2xPING", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rdb.Ping(ctx)
			rdb.Ping(ctx)
		}
	})
}

// BenchmarkInterceptorCPU is BenchmarkInterceptor with Redis answering at
// once (redistest.Instant): locked minus bare is the interceptor's CPU
// beside its two round trips.
func BenchmarkInterceptorCPU(b *testing.B) {
	ic, req := benchSetup(b, redistest.InstantClient(b))
	direct(b, ic, req)
}

// BenchmarkInterceptorGRPC is a whole unary call over loopback gRPC: bare,
// behind the interceptor, and bare with two PINGs in the handler, the floor
// of two Redis round trips made from inside a call (on this kind of VM a
// connection that sat idle during the gRPC hop answers slower than a busy
// one). On a real Redis when there is one.
func BenchmarkInterceptorGRPC(b *testing.B) {
	rdb := redistest.Best(b).Client(b)
	ic, req := benchSetup(b, rdb)
	bare := &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) { return reply, nil }}
	pings := &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		rdb.Ping(ctx)
		rdb.Ping(ctx)
		return reply, nil
	}}
	for _, bc := range []struct {
		name string
		srv  *shop.Server
		opts []grpc.ServerOption
	}{
		{"bare", bare, nil},
		{"locked", bare, []grpc.ServerOption{grpc.ChainUnaryInterceptor(ic)}},
		{"2xPING-in-handler", pings, nil}, // the floor: two Redis round trips inside the call
	} {
		b.Run(bc.name, func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			s := grpc.NewServer(bc.opts...)
			shop.Register(s, bc.srv)
			done := make(chan struct{})
			go func() { defer close(done); _ = s.Serve(lis) }()
			defer func() { s.Stop(); <-done }()
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			ctx := context.Background()
			out := shop.New("ReserveReply")
			if err := cc.Invoke(ctx, shop.Reserve, req, out); err != nil { // warm: connection up
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := cc.Invoke(ctx, shop.Reserve, req, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
