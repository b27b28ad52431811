package main

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/routelock/lock/examples/grpc/shoppb"
	"github.com/routelock/lock/examples/internal/leftover"
)

// TestRun serves the example on embedded Redis, calls it as grpcurl would
// (reflection, then Reserve), and stops it.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- run(ctx, lis, 1) }()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "shop.v1.Inventory"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("reflection does not describe shop.v1.Inventory: %v %v", resp, err)
	}
	stream.CloseSend()

	inv := shoppb.NewInventoryClient(cc)
	reserve := func() error {
		_, err := inv.Reserve(ctx, &shoppb.ReserveRequest{ProductId: 42, Quantity: 1})
		return err
	}
	if err := reserve(); err != nil {
		t.Fatalf("first Reserve: %v", err)
	}
	if err := reserve(); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Reserve past the stock: %v, want FailedPrecondition", err)
	}
	if _, err := inv.Reserve(ctx, &shoppb.ReserveRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Reserve without product_id: %v, want InvalidArgument", err)
	}
	cancel()
	if err := <-served; err != nil && err != grpc.ErrServerStopped {
		t.Fatal(err)
	}
}

// TestRunLeavesNoKeys: pointed at a Redis of the user's (REDIS_URL), the
// server deletes, once stopped, every key it wrote (stock, orders, the
// locks' keys), and no key of the user's.
func TestRunLeavesNoKeys(t *testing.T) {
	leftover.Check(t, func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		served := make(chan error, 1)
		go func() { served <- run(ctx, lis, 5) }()
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		if _, err := shoppb.NewInventoryClient(cc).Reserve(ctx, &shoppb.ReserveRequest{ProductId: 42, Quantity: 1}); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		if _, err := shoppb.NewOrdersClient(cc).Create(ctx, &shoppb.CreateOrderRequest{Order: &shoppb.Order{UserId: "u7", ProductId: 42}}); err != nil {
			t.Fatalf("Create: %v", err)
		}
		cancel()
		if err := <-served; err != nil && err != grpc.ErrServerStopped {
			t.Fatal(err)
		}
	})
}
