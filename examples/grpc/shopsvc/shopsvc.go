// Package shopsvc is the example shop service: an inventory and an order
// service whose handlers do plain read-modify-writes on Redis, safe only
// because routelock serialises them per product and per user. It is built
// on ordinary generated code (package shoppb, from shop.proto).
package shopsvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/examples/grpc/shoppb"
	"github.com/routelock/lock/interceptor"
)

// NewServer returns a gRPC server of the shop on rdb, its keys starting
// with prefix (such as "shop:"), every product starting with initial
// items, its methods locked by locker:
//
//	Reserve  locks the product (product_id, as the resource productID), waiting up to 2s
//	Restock  (client stream) locks the product named by its first message,
//	         and restocks only that one
//	Create   locks the user (order.user_id) and fails fast
//
// Server reflection is on, so grpcurl can call it.
func NewServer(locker *lock.Locker, rdb redis.UniversalClient, prefix string, initial int64) *grpc.Server {
	unary := interceptor.Config{Rules: []interceptor.Rule{
		interceptor.Method(shoppb.Inventory_Reserve_FullMethodName, interceptor.Field("product_id").As("productID"), lock.Wait(2*time.Second)),
		interceptor.Method(shoppb.Orders_Create_FullMethodName, interceptor.Field("order.user_id"), lock.FailFast()),
	}}
	stream := interceptor.Config{Rules: []interceptor.Rule{
		interceptor.Method(shoppb.Inventory_Restock_FullMethodName, interceptor.Field("product_id").As("productID")),
	}}
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(interceptor.UnaryServer(locker, unary)),
		grpc.ChainStreamInterceptor(interceptor.StreamServer(locker, stream)),
	)
	shoppb.RegisterInventoryServer(s, &inventory{rdb: rdb, prefix: prefix, initial: initial})
	shoppb.RegisterOrdersServer(s, &orders{rdb: rdb, prefix: prefix})
	// A rule whose method is misspelt would leave that method unlocked.
	if err := interceptor.Check(s, append(unary.Rules, stream.Rules...)...); err != nil {
		panic(err)
	}
	reflection.Register(s)
	return s
}

// inventory keeps each product's stock in Redis and changes it with a
// plain read-modify-write: safe only because the lock serialises it.
type inventory struct {
	shoppb.UnimplementedInventoryServer
	rdb     redis.UniversalClient
	prefix  string
	initial int64
}

func (inv *inventory) stockKey(id int64) string {
	return inv.prefix + "stock:" + strconv.FormatInt(id, 10)
}

func (inv *inventory) Reserve(ctx context.Context, req *shoppb.ReserveRequest) (*shoppb.ReserveReply, error) {
	id, qty := req.GetProductId(), int64(req.GetQuantity())
	if qty <= 0 {
		qty = 1
	}
	inv.rdb.SetNX(ctx, inv.stockKey(id), inv.initial, 0)
	left, err := inv.rdb.Get(ctx, inv.stockKey(id)).Int64()
	if err != nil {
		return nil, err
	}
	if left < qty {
		return nil, status.Errorf(codes.FailedPrecondition, "only %d left", left)
	}
	if err := inv.rdb.Set(ctx, inv.stockKey(id), left-qty, 0).Err(); err != nil {
		return nil, err
	}
	fence, _ := lock.FencingToken(ctx) // a store that checks it refuses stale writers
	return &shoppb.ReserveReply{Left: left - qty, Fence: fence}, nil
}

// Restock adds the quantities of a stream of ReserveRequests to one
// product: the one its first message names, which is the one the stream
// locked. A message for another product ends the stream with
// InvalidArgument before anything is written (that product is not locked),
// and so does an empty stream (no product, no lock).
func (inv *inventory) Restock(ss grpc.ClientStreamingServer[shoppb.ReserveRequest, shoppb.ReserveReply]) error {
	ctx := ss.Context()
	var id, added int64
	for n := 0; ; n++ {
		m, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		switch pid := m.GetProductId(); {
		case n == 0:
			id = pid
		case pid != id:
			return status.Errorf(codes.InvalidArgument, "a Restock stream restocks the product of its first message (%d), which it locked; got %d", id, pid)
		}
		added += int64(m.GetQuantity())
	}
	if id == 0 {
		return status.Error(codes.InvalidArgument, "empty Restock stream: no product to restock")
	}
	inv.rdb.SetNX(ctx, inv.stockKey(id), inv.initial, 0)
	left, err := inv.rdb.IncrBy(ctx, inv.stockKey(id), added).Result()
	if err != nil {
		return err
	}
	fence, _ := lock.FencingToken(ctx)
	return ss.SendAndClose(&shoppb.ReserveReply{Left: left, Fence: fence})
}

// orders numbers each user's orders with a counter in Redis.
type orders struct {
	shoppb.UnimplementedOrdersServer
	rdb    redis.UniversalClient
	prefix string
}

func (o *orders) Create(ctx context.Context, req *shoppb.CreateOrderRequest) (*shoppb.CreateOrderReply, error) {
	user := req.GetOrder().GetUserId()
	n, err := o.rdb.Incr(ctx, o.prefix+"orders:"+user).Result()
	if err != nil {
		return nil, err
	}
	fence, _ := lock.FencingToken(ctx)
	return &shoppb.CreateOrderReply{OrderId: fmt.Sprintf("%s-%d", user, n), Fence: fence}, nil
}
