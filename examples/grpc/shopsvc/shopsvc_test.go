package shopsvc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/examples/grpc/shoppb"
	"github.com/routelock/lock/examples/grpc/shopsvc"
)

// TestRestockTouchesOnlyWhatItLocks: a Restock stream locks the product of
// its first message, so it must write that product only. A stream that
// names another product later, or none at all, is refused with
// InvalidArgument and writes nothing (before, 42 then 43 restocked 43
// while holding productID:42, and an empty stream created shop:stock:0).
func TestRestockTouchesOnlyWhatItLocks(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	locker := lock.New(rdb)
	t.Cleanup(func() { _ = locker.Close() })
	srv := shopsvc.NewServer(locker, rdb, "shop:", 10)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })

	restock := func(ids ...int64) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := shoppb.NewInventoryClient(cc).Restock(ctx)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := st.Send(&shoppb.ReserveRequest{ProductId: id, Quantity: 5}); err != nil {
				break // the server ended the stream; CloseAndRecv says why
			}
		}
		_, err = st.CloseAndRecv()
		return err
	}

	if err := restock(42, 43); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Restock 42 then 43: %v, want InvalidArgument", err)
	}
	if err := restock(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty Restock: %v, want InvalidArgument", err)
	}
	for _, k := range []string{"shop:stock:42", "shop:stock:43", "shop:stock:0"} {
		if mr.Exists(k) {
			v, _ := mr.Get(k)
			t.Errorf("%s written (%s) by a refused stream", k, v)
		}
	}
	if err := restock(42, 42); err != nil {
		t.Fatalf("Restock 42 twice: %v", err)
	}
	if v, _ := mr.Get("shop:stock:42"); v != "20" {
		t.Fatalf("shop:stock:42 = %q, want 20 (10 + 5 + 5)", v)
	}
}
