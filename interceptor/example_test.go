package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// A key from a field of the request message, named as the HTTP routes on
// {productID} name it, so that both lock one resource; and a key that
// joins a metadata entry to a nested field. What a client is told when the
// field is not set names the key, never a value.
func ExampleField() {
	product := interceptor.Field("product_id").As("productID")
	req := shop.Set(shop.New("ReserveRequest"), "product_id", int64(42))
	parts, err := product.RPC(context.Background(), req)
	fmt.Println(parts, err)

	tenantUser := keyfunc.Join(interceptor.Metadata("X-Tenant"), interceptor.Field("order.user_id"))
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "acme"))
	order := shop.Set(shop.New("CreateOrderRequest"), "order", shop.Set(shop.New("Order"), "user_id", "u7"))
	parts, err = tenantUser.RPC(ctx, order)
	fmt.Println(parts, err, tenantUser)

	_, err = product.RPC(context.Background(), shop.New("ReserveRequest"))
	fmt.Println(errors.Is(err, keyfunc.ErrMissing), status.Convert(interceptor.Status(err)).Message())
	// Output:
	// [productID 42] <nil>
	// [x-tenant acme order.user_id u7] <nil> Join(Metadata(x-tenant), Field(order.user_id))
	// true routelock: invalid lock key: Field(product_id): missing
}

// The status a refused call ends with: its code, a message that carries
// no key value or token, and, for a busy lock, when to retry.
func ExampleStatus() {
	busy := &lockcore.ContentionError{Key: "productID:42", RetryAfter: 300 * time.Millisecond}
	st := status.Convert(interceptor.Status(busy))
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			fmt.Println(st.Code(), st.Message(), "retry in", ri.RetryDelay.AsDuration())
		}
	}
	gone := errors.Join(&lockcore.ContentionError{Key: "productID:42"}, context.Canceled)
	fmt.Println(status.Code(interceptor.Status(gone)))
	_, missing := interceptor.Field("product_id").RPC(context.Background(), shop.New("ReserveRequest"))
	fmt.Println(status.Convert(interceptor.Status(missing)).Message())
	fmt.Println(status.Code(interceptor.Status(fmt.Errorf("%w: wrong password", lockcore.ErrMisconfigured))))
	// Output:
	// Aborted routelock: resource busy, retry later retry in 300ms
	// Canceled
	// routelock: invalid lock key: Field(product_id): missing
	// Internal
}
