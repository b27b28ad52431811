package interceptor_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// TestCheckFindsRulesThatMatchNothing: a rule for a misspelt method
// ("/grpc.health.v1.Health/Chek") would leave Check unlocked without a
// word; interceptor.Check names it, and a service that is not registered,
// at startup, and passes rules that match.
func TestCheckFindsRulesThatMatchNothing(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	locker := lock.New(rdb)
	t.Cleanup(func() { _ = locker.Close() })
	good := []interceptor.Rule{
		interceptor.Method("/shop.Inventory/Reserve", interceptor.Field("product_id")),
		interceptor.Method("/grpc.health.v1.Health/Check", interceptor.Metadata("x-tenant")),
		interceptor.Method("/shop.Orders/*", interceptor.Field("order.user_id")),
		interceptor.Method("*", interceptor.Metadata("x-tenant")),
	}
	bad := []interceptor.Rule{
		interceptor.Method("/grpc.health.v1.Health/Chek", interceptor.Metadata("x-tenant")),
		interceptor.Method("/shop.Nope/*", interceptor.Field("product_id")),
	}
	rules := append(append([]interceptor.Rule{}, good...), bad...)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.UnaryServer(locker, interceptor.Config{Rules: rules})))
	shop.Register(srv, &shop.Server{})
	healthpb.RegisterHealthServer(srv, health.NewServer())

	if err := interceptor.Check(srv, good...); err != nil {
		t.Fatalf("Check of rules that match: %v", err)
	}
	err := interceptor.Check(srv, rules...)
	if !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("Check: %v, want ErrMisconfigured", err)
	}
	for _, m := range []string{"/grpc.health.v1.Health/Chek", "/shop.Nope/*"} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("Check does not name %s: %v", m, err)
		}
	}
	if strings.Contains(err.Error(), "Reserve") {
		t.Errorf("Check names a rule that matches: %v", err)
	}
}

// TestExactRuleWithoutItsKeyIsLogged: an exact rule whose key the method's
// message lacks answers Internal without running the handler, and the
// configured logger hears of it once, with the method and the key function.
func TestExactRuleWithoutItsKeyIsLogged(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	var logged bytes.Buffer
	var mu sync.Mutex
	locker := lock.New(rdb)
	t.Cleanup(func() { _ = locker.Close() })
	var ran atomic.Int32
	rig := newFakeRig(t, locker, interceptor.Config{
		Rules:  []interceptor.Rule{interceptor.Method(shop.Reserve, interceptor.Field("sku"))},
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil)),
	}, &shop.Server{Reserve: func(context.Context, *dynamicpb.Message) (*dynamicpb.Message, error) {
		ran.Add(1)
		return shop.New("ReserveReply"), nil
	}})
	cc := rig.cc
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		err := cc.Invoke(ctx, shop.Reserve, shop.Set(shop.New("ReserveRequest"), "product_id", int64(42)), shop.New("ReserveReply"))
		if status.Code(err) != codes.Internal {
			t.Fatalf("call %d: %v, want Internal", i, err)
		}
	}
	if ran.Load() != 0 {
		t.Fatalf("the handler ran %d times", ran.Load())
	}
	mu.Lock()
	log := logged.String()
	mu.Unlock()
	if strings.Count(log, "does not apply to its method") != 1 || !strings.Contains(log, shop.Reserve) || !strings.Contains(log, "Field(sku)") {
		t.Fatalf("log: %q, want one line naming %s and Field(sku)", log, shop.Reserve)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestCheckFindsFieldsTheMessageLacks: a rule whose Field path the
// request message of its method does not have (productId for product_id,
// a path through a scalar, a service-wide rule none of whose methods has
// the field) is reported by Check at startup, naming the method, the path
// and the message type; rules whose fields exist, and a "*" rule whose
// field only some methods have (the others pass unlocked), are not. A call
// of such a method is refused with Internal and words that blame the
// method's lock configuration, not the lock service.
func TestCheckFindsFieldsTheMessageLacks(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	locker := lock.New(rdb)
	t.Cleanup(func() { _ = locker.Close() })
	good := []interceptor.Rule{
		interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID")),
		interceptor.Method(shop.Create, keyfunc.Join(interceptor.Metadata("x-tenant"), interceptor.Field("order.user_id"))),
		interceptor.Method("/shop.Orders/*", interceptor.Field("order.product_id")),
		interceptor.Method("*", interceptor.Field("product_id")),
	}
	if err := interceptor.Check(newShopServer(locker, good), good...); err != nil {
		t.Fatalf("Check of rules whose fields exist: %v", err)
	}
	for _, tc := range []struct {
		rule interceptor.Rule
		want []string
	}{
		{interceptor.Method(shop.Reserve, interceptor.Field("productId")), []string{shop.Reserve, "productId", "shop.ReserveRequest"}},
		{interceptor.Method(shop.Create, interceptor.Field("order.userId").Also(interceptor.Field("order.product_id"))), []string{shop.Create, "order.userId", "shop.Order"}},
		{interceptor.Method(shop.Create, interceptor.Field("order.user_id.first")), []string{shop.Create, "order.user_id.first", "shop.Order"}},
		{interceptor.Method("/shop.Orders/*", interceptor.Field("productId")), []string{"/shop.Orders/*", "productId", "shop.CreateOrderRequest"}},
	} {
		rules := []interceptor.Rule{tc.rule}
		err := interceptor.Check(newShopServer(locker, rules), rules...)
		if !errors.Is(err, lockcore.ErrMisconfigured) {
			t.Errorf("Check of %s %v: %v, want ErrMisconfigured", tc.rule.Method, tc.rule.Key, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Check of %s %v: %q does not name %s", tc.rule.Method, tc.rule.Key, err, w)
			}
		}
	}

	rig := newFakeRig(t, locker, interceptor.Config{Rules: []interceptor.Rule{interceptor.Method(shop.Reserve, interceptor.Field("productId"))}}, &shop.Server{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := rig.cc.Invoke(ctx, shop.Reserve, shop.Set(shop.New("ReserveRequest"), "product_id", int64(42)), shop.New("ReserveReply"))
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.Internal || strings.Contains(msg, "lock service") || !strings.Contains(msg, "configuration") || !strings.Contains(msg, "Field(productId)") {
		t.Fatalf("call of a method whose rule names a field it lacks: %v; want Internal, blaming the method's lock configuration and naming Field(productId)", err)
	}
}

// newShopServer returns a gRPC server with the shop's services registered,
// locked by rules; it is never served.
func newShopServer(locker *lock.Locker, rules []interceptor.Rule) *grpc.Server {
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.UnaryServer(locker, interceptor.Config{Rules: rules})))
	shop.Register(srv, &shop.Server{})
	return srv
}
