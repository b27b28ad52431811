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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/examples/grpc/shoppb"
	"github.com/routelock/lock/interceptor"
)

// A unary method that runs once per idempotency key: the retry of a call
// gets the stored reply, marked idempotent-replayed, and the key reused
// with another payload is refused.
func ExampleIdempotency() {
	mr, err := miniredis.Run() // any Redis; embedded here
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.Idempotency(locker, interceptor.IdempotencyConfig{
		Policy: lock.Wait(10 * time.Second), // how long a duplicate waits for the first call
	})))
	left := int64(10)
	shoppb.RegisterInventoryServer(srv, &inventory{reserve: func(ctx context.Context, r *shoppb.ReserveRequest) (*shoppb.ReserveReply, error) {
		left -= int64(r.Quantity)
		fmt.Println("reserved", r.Quantity)
		return &shoppb.ReserveReply{Left: left}, nil
	}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	client := shoppb.NewInventoryClient(cc)

	ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "3c9ae5ea-980f-4ebd-a027-04529942b95e")
	for range 2 {
		var hdr metadata.MD
		reply, err := client.Reserve(ctx, &shoppb.ReserveRequest{ProductId: 42, Quantity: 3}, grpc.Header(&hdr))
		fmt.Println("left:", reply.GetLeft(), err, "replayed:", hdr.Get("idempotent-replayed"))
	}
	_, err = client.Reserve(ctx, &shoppb.ReserveRequest{ProductId: 42, Quantity: 5})
	fmt.Println("another payload:", status.Code(err))
	// Output:
	// reserved 3
	// left: 7 <nil> replayed: []
	// left: 7 <nil> replayed: [true]
	// another payload: FailedPrecondition
}
