// Command client calls the shop's gRPC service (examples/grpc/server): many
// buyers reserve the same product at once, and exactly the stock is sold,
// because the server locks each product while Reserve runs.
//
//	go run ./examples/grpc/client                         # starts its own server on embedded Redis
//	go run ./examples/grpc/client -addr 127.0.0.1:50051   # calls a running server
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/examples/grpc/shoppb"
	"github.com/routelock/lock/examples/grpc/shopsvc"
	"github.com/routelock/lock/examples/redisenv"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/lockcore/redisengine"
)

func main() {
	addr := flag.String("addr", "", "server address; empty: start one in this process on embedded Redis (or REDIS_URL)")
	buyers := flag.Int("buyers", 50, "concurrent Reserve calls")
	product := flag.Int64("product", 42, "product ID")
	stock := flag.Int64("stock", 10, "initial stock, for the server this process starts")
	flag.Parse()
	if err := run(*addr, *buyers, *product, *stock); err != nil {
		log.Fatal(err)
	}
}

func run(addr string, buyers int, product, stock int64) error {
	own := addr == ""
	if own {
		stop, a, err := startServer(stock)
		if err != nil {
			return err
		}
		defer stop()
		addr = a
	}
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClient()), // carries the owner token of nested calls
	)
	if err != nil {
		return err
	}
	defer cc.Close()
	inv := shoppb.NewInventoryClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	fmt.Printf("%d buyers reserve product %d at once on %s\n", buyers, product, addr)
	var mu sync.Mutex
	count := map[codes.Code]int{}
	var wg sync.WaitGroup
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := inv.Reserve(ctx, &shoppb.ReserveRequest{ProductId: product, Quantity: 1})
			mu.Lock()
			count[status.Code(err)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	fmt.Printf("  reserved: %d   sold out: %d   busy (Aborted): %d   other: %d\n",
		count[codes.OK], count[codes.FailedPrecondition], count[codes.Aborted],
		buyers-count[codes.OK]-count[codes.FailedPrecondition]-count[codes.Aborted])
	if want := min(int64(buyers), stock); own && int64(count[codes.OK]) != want {
		return fmt.Errorf("reserved %d, want %d: the lock did not hold", count[codes.OK], want)
	}

	// Restock over a client stream: the lock is taken on its first message.
	st, err := inv.Restock(ctx)
	if err != nil {
		return err
	}
	for range 3 {
		if err := st.Send(&shoppb.ReserveRequest{ProductId: product, Quantity: 2}); err != nil {
			return err
		}
	}
	reply, err := st.CloseAndRecv()
	if err != nil {
		return fmt.Errorf("restock: %w", err)
	}
	fmt.Printf("restocked 6: %d left (fencing token %d)\n", reply.GetLeft(), reply.GetFence())

	// A request that names no product is refused before the handler runs.
	_, err = inv.Reserve(ctx, &shoppb.ReserveRequest{})
	fmt.Printf("Reserve without product_id: %v: %s\n", status.Code(err), status.Convert(err).Message())
	return nil
}

// startServer runs the shop service on a loopback port of this process.
func startServer(stock int64) (stop func(), addr string, err error) {
	env, err := redisenv.Open()
	if err != nil {
		return nil, "", err
	}
	// Every key of this run, the locks' included, starts with prefix, and
	// is deleted when the server stops: a Redis that REDIS_URL names keeps
	// nothing of it.
	prefix := redisenv.RunPrefix("shop")
	rdb := env.Client()
	engine, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix + "lock:"})
	if err != nil {
		rdb.Close()
		env.Close()
		return nil, "", err
	}
	closeAll := func() {
		engine.Close()
		if err := env.Sweep(context.Background(), prefix); err != nil {
			fmt.Printf("deleting the keys %s*: %v\n", prefix, err)
		}
		rdb.Close()
		env.Close()
	}
	s := shopsvc.NewServer(lock.FromEngine(engine), rdb, prefix, stock)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeAll()
		return nil, "", err
	}
	fmt.Printf("started the shop server on %s, %s\n", lis.Addr(), env.Desc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	return func() {
		s.GracefulStop()
		<-done
		closeAll()
	}, lis.Addr().String(), nil
}
