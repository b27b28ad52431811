package keyfunc_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/keyfunc"
)

// BenchmarkField measures one evaluation of Field: a top-level and a nested
// field of a dynamic message, a field of a generated one, and the errors of
// a field the message does not have and of one that is not set.
func BenchmarkField(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name, path string
		msg        any
		err        error
	}{
		{"product_id", "product_id", shop.Set(shop.New("ReserveRequest"), "product_id", int64(42)), nil},
		{"order.user_id", "order.user_id", shop.Set(shop.New("CreateOrderRequest"), "order", shop.Set(shop.New("Order"), "user_id", "u7")), nil},
		{"generated", "value", wrapperspb.String("gen"), nil},
		{"skip", "nope", shop.New("ReserveRequest"), keyfunc.ErrSkip},
		{"missing", "product_id", shop.New("ReserveRequest"), keyfunc.ErrMissing},
	} {
		f := keyfunc.Field(bc.path)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.RPC(ctx, bc.msg); !errors.Is(err, bc.err) {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMetadata measures one evaluation of Metadata.
func BenchmarkMetadata(b *testing.B) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "t1"))
	f := keyfunc.Metadata("x-tenant")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.RPC(ctx, nil); err != nil {
			b.Fatal(err)
		}
	}
}
