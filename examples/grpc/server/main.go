// Command server is the shop's inventory and order service over gRPC, with
// routelock guarding its methods:
//
//	Reserve  locks the product (product_id, as the resource productID), waiting up to 2s
//	Restock  (client stream) locks the product named by its first message, and restocks only that one
//	Create   locks the user (order.user_id) and fails fast
//
// Run it on embedded Redis (or REDIS_URL) and call it with grpcurl; server
// reflection is on. Its keys start with a prefix of the run's own
// ("shop:<random>:"), and are deleted when it stops (Ctrl-C):
//
//	go run ./examples/grpc/server
//	grpcurl -plaintext -d '{"product_id": 42, "quantity": 1}' 127.0.0.1:50051 shop.v1.Inventory/Reserve
//	grpcurl -plaintext -d '{"order": {"user_id": "u7", "product_id": 42}}' 127.0.0.1:50051 shop.v1.Orders/Create
//	grpcurl -plaintext -d '{}' 127.0.0.1:50051 shop.v1.Inventory/Reserve   # InvalidArgument: no product_id
//
// The service (package shopsvc) is built on ordinary generated code
// (package shoppb, from shop.proto, committed so that building needs no
// protoc). examples/grpc/client calls it.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"os"
	"os/signal"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/examples/grpc/shopsvc"
	"github.com/routelock/lock/examples/redisenv"
	"github.com/routelock/lock/lockcore/redisengine"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "listen address")
	stock := flag.Int64("stock", 10, "initial stock of every product")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if err := run(ctx, lis, *stock); err != nil {
		log.Fatal(err)
	}
}

// run serves the shop on lis until ctx ends.
func run(ctx context.Context, lis net.Listener, initial int64) error {
	env, err := redisenv.Open()
	if err != nil {
		return err
	}
	defer env.Close()
	// Every key of this run, the locks' included, starts with prefix, and
	// is deleted when the server stops: a Redis that REDIS_URL names keeps
	// nothing of it.
	prefix := redisenv.RunPrefix("shop")
	defer func() {
		if err := env.Sweep(context.Background(), prefix); err != nil {
			log.Printf("deleting the keys %s*: %v", prefix, err)
		}
	}()
	rdb := env.Client()
	defer rdb.Close()
	// redisengine.New with a Prefix, given to lock.FromEngine: lock.New's
	// keys are all under "routelock:".
	engine, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix + "lock:"})
	if err != nil {
		return err
	}
	defer engine.Close()
	locker := lock.FromEngine(engine)

	s := shopsvc.NewServer(locker, rdb, prefix, initial)

	log.Printf("shop gRPC server on %s, %s, keys under %s", lis.Addr(), env.Desc, prefix)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			s.GracefulStop()
		case <-done:
		}
	}()
	return s.Serve(lis)
}
