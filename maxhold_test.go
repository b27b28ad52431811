package lock_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// maxHoldCeiling is the MaxHold of the tests below; the lease's TTL is 10 s
// (the engine's default), so a second request that gets the lock well
// before that got it from the ceiling.
const maxHoldCeiling = 300 * time.Millisecond

// stuckHold is what a handler that never returns by itself saw: its fence,
// and the cause its context ended with.
type stuckHold struct {
	fence int64
	cause error
}

// awaitStuck returns what the stuck handler saw once its context ended,
// failing the test when that takes longer than the lease's TTL.
func awaitStuck(t *testing.T, stuck <-chan stuckHold) stuckHold {
	t.Helper()
	select {
	case s := <-stuck:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck handler's context did not end")
		return stuckHold{}
	}
}

// TestHTTPMaxHold: a route with MaxHold whose handler runs on has its
// request's context cancelled with ErrMaxHold once it has held the lock
// that long, and a request of another instance waiting for the product
// gets the lock then, with a greater fence, while the first handler has
// not returned.
func TestHTTPMaxHold(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		entered := make(chan struct{})
		stuck := make(chan stuckHold, 1)
		leave := make(chan struct{})
		first := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix})
		t.Cleanup(func() { first.Close() })
		r1 := chi.NewRouter()
		r1.With(first.ByParam("productID", lock.MaxHold(maxHoldCeiling))).Post("/products/{productID}/restock", func(w http.ResponseWriter, r *http.Request) {
			fence, _ := lock.FencingToken(r.Context())
			close(entered)
			<-r.Context().Done()
			stuck <- stuckHold{fence, context.Cause(r.Context())}
			<-leave // runs on past its ceiling
		})
		second := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix})
		t.Cleanup(func() { second.Close() })
		fences := make(chan int64, 1)
		r2 := chi.NewRouter()
		r2.With(second.ByParam("productID", lock.Wait(8*time.Second))).Post("/products/{productID}/restock", func(w http.ResponseWriter, r *http.Request) {
			fence, _ := lock.FencingToken(r.Context())
			fences <- fence
		})
		s1, s2 := httptest.NewServer(r1), httptest.NewServer(r2)
		t.Cleanup(s2.Close)
		t.Cleanup(s1.Close)
		t.Cleanup(func() { close(leave) })

		go func() {
			resp, err := s1.Client().Post(s1.URL+"/products/42/restock", "", nil)
			if err == nil {
				resp.Body.Close()
			}
		}()
		<-entered
		start := time.Now()
		resp, err := s2.Client().Post(s2.URL+"/products/42/restock", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		waited := time.Since(start)
		if resp.StatusCode != http.StatusOK || waited > 5*time.Second {
			t.Fatalf("the waiting request: %d after %v; want 200 at the first one's MaxHold %v", resp.StatusCode, waited, maxHoldCeiling)
		}
		s := awaitStuck(t, stuck)
		if !errors.Is(s.cause, lockcore.ErrMaxHold) || !errors.Is(s.cause, lockcore.ErrLockLost) {
			t.Fatalf("the first handler's context ended with %v, want ErrMaxHold", s.cause)
		}
		if f := <-fences; f <= s.fence {
			t.Fatalf("the second holder's fence %d, not above the first's %d", f, s.fence)
		}
	})
}

// TestGRPCMaxHold: the same for a gRPC method with MaxHold: its handler's
// context ends with ErrMaxHold at the ceiling, and another server's call
// waiting for the product gets the lock then, with a greater fence.
func TestGRPCMaxHold(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		entered := make(chan struct{})
		stuck := make(chan stuckHold, 1)
		leave := make(chan struct{})
		first := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix})
		t.Cleanup(func() { first.Close() })
		srv := &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			fence, _ := lock.FencingToken(ctx)
			close(entered)
			<-ctx.Done()
			stuck <- stuckHold{fence, context.Cause(ctx)}
			<-leave // runs on past its ceiling: the lock must be freed without its return
			return nil, context.Cause(ctx)
		}}
		addr := serveGRPC(t, srv, grpc.ChainUnaryInterceptor(unaryServer(first,
			interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"), lock.MaxHold(maxHoldCeiling)))))
		waiting := newGRPCShop(t, b, prefix, interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"), lock.Wait(8*time.Second)))
		ctx := context.Background()
		t.Cleanup(func() { close(leave) })

		cc := dial(t, addr)
		go func() { _, _ = reserve(ctx, cc, 42) }()
		<-entered
		start := time.Now()
		reply, err := reserve(ctx, dial(t, waiting.addr), 42)
		if err != nil {
			t.Fatalf("the waiting call: %v", err)
		}
		if waited := time.Since(start); waited > 5*time.Second {
			t.Fatalf("the waiting call got the lock after %v; want at the first one's MaxHold %v", waited, maxHoldCeiling)
		}
		s := awaitStuck(t, stuck)
		if !errors.Is(s.cause, lockcore.ErrMaxHold) {
			t.Fatalf("the first handler's context ended with %v, want ErrMaxHold", s.cause)
		}
		if f := shop.Int(reply, "fence"); f <= s.fence {
			t.Fatalf("the second holder's fence %d, not above the first's %d", f, s.fence)
		}
	})
}
