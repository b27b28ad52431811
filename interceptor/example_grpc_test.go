package interceptor_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/shop"
)

// Per-method locks on a gRPC server, keyed by request message fields, and
// the client interceptor that carries owner tokens on; the lines between
// the "readme" marks are the README's gRPC block. The shop service here is
// defined without protoc (see internal/shop); generated services are
// configured the same way (see examples/grpc).
func ExampleUnaryServer() {
	mr, err := miniredis.Run() // any Redis; embedded here
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := lis.Addr().String()

	// readme:begin grpc
	rules := interceptor.Config{Rules: []interceptor.Rule{
		interceptor.Method("/shop.Inventory/Reserve", interceptor.Field("product_id").As("productID"), lock.Wait(time.Second)),
		interceptor.Method("/shop.Orders/Create", interceptor.Field("order.user_id"), lock.FailFast()),
		interceptor.Method("/shop.Admin/*", interceptor.Metadata("x-tenant-id")), // every method of a service; "*" for all
	}}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(interceptor.UnaryServer(locker, rules)),
		grpc.ChainStreamInterceptor(interceptor.StreamServer(locker, interceptor.Config{ /* rules */ })),
	)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClient())) // nested calls re-enter
	// readme:end
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	shop.Register(srv, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		fmt.Println("reserving, holding", lock.Keys(ctx))
		return shop.New("ReserveReply"), nil
	}})
	go srv.Serve(lis)
	defer srv.Stop()

	ctx := context.Background()
	err = cc.Invoke(ctx, shop.Reserve, shop.Set(shop.New("ReserveRequest"), "product_id", int64(42)), shop.New("ReserveReply"))
	fmt.Println("Reserve 42:", status.Code(err))
	err = cc.Invoke(ctx, shop.Reserve, shop.New("ReserveRequest"), shop.New("ReserveReply"))
	fmt.Println("Reserve without product_id:", status.Code(err))
	// Output:
	// reserving, holding [productID:42]
	// Reserve 42: OK
	// Reserve without product_id: InvalidArgument
}
