package grpclock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/grpclock"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/keyfunc"
)

// TestCheckFindsRulesThatMatchNothing: a rule for a misspelt method
// ("/grpc.health.v1.Health/Chek") would leave Check unlocked without a
// word; grpclock.Check names it, and a service that is not registered,
// at startup, and passes rules that match.
func TestCheckFindsRulesThatMatchNothing(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	locker := lock.New(rdb)
	t.Cleanup(func() { _ = locker.Close() })
	good := []grpclock.MethodRule{
		grpclock.Method("/shop.Inventory/Reserve", keyfunc.Field("product_id")),
		grpclock.Method("/grpc.health.v1.Health/Check", keyfunc.Metadata("x-tenant")),
		grpclock.Method("/shop.Orders/*", keyfunc.Field("order.user_id")),
		grpclock.Method("*", keyfunc.Metadata("x-tenant")),
	}
	bad := []grpclock.MethodRule{
		grpclock.Method("/grpc.health.v1.Health/Chek", keyfunc.Metadata("x-tenant")),
		grpclock.Method("/shop.Nope/*", keyfunc.Field("product_id")),
	}
	rules := append(append([]grpclock.MethodRule{}, good...), bad...)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclock.UnaryServerInterceptor(locker, rules...)))
	shop.Register(srv, &shop.Server{})
	healthpb.RegisterHealthServer(srv, health.NewServer())

	if err := grpclock.Check(srv, good...); err != nil {
		t.Fatalf("Check of rules that match: %v", err)
	}
	err := grpclock.Check(srv, rules...)
	if !errors.Is(err, lock.ErrMisconfigured) {
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
