package lock_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// exclusion counts the holders of each resource inside handlers and
// records any overlap.
type exclusion struct {
	mu       sync.Mutex
	inside   map[string]int
	overlaps atomic.Int64
}

func (x *exclusion) enter(keys []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.inside == nil {
		x.inside = map[string]int{}
	}
	for _, k := range keys {
		if x.inside[k]++; x.inside[k] > 1 {
			x.overlaps.Add(1)
		}
	}
}

func (x *exclusion) leave(keys []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range keys {
		x.inside[k]--
	}
}

// TestHTTPSeveralResources: routes that lock a product and a buyer, one
// naming them product first and the other buyer first, on two instances
// under 64 concurrent requests: every request is served (no deadlock),
// no two handlers hold a resource at once, each handler's context holds
// both with a fence each, and nothing is left held. A request whose buyer
// is held elsewhere fails fast and leaves the product free.
func TestHTTPSeveralResources(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		var x exclusion
		var bad atomic.Value
		handler := func(w http.ResponseWriter, r *http.Request) {
			keys := lock.Keys(r.Context())
			held := lockcore.HeldFrom(r.Context())
			if len(keys) != 2 || len(held) != 2 || held[0].Fence == 0 || held[1].Fence == 0 {
				bad.Store(fmt.Sprintf("the handler holds %v (%+v)", keys, held))
			}
			x.enter(keys)
			time.Sleep(200 * time.Microsecond) // the handler's work
			x.leave(keys)
		}
		build := func(a *app) http.Handler {
			r := chi.NewRouter()
			buyer := keyfunc.Header("X-User-ID").As("userID")
			product := keyfunc.Param("productID")
			r.With(a.locker.By(product.Also(buyer), lock.Wait(20*time.Second))).Post("/products/{productID}/buy", handler)
			r.With(a.locker.By(buyer.Also(product), lock.Wait(20*time.Second))).Post("/products/{productID}/refund", handler)
			r.With(a.locker.By(buyer, lock.Wait(20*time.Second))).Post("/users/hold", func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
			})
			r.With(a.locker.By(product.Also(buyer), lock.FailFast())).Post("/products/{productID}/try", handler)
			return r
		}
		a1, a2 := newApp(t, b, prefix, build), newApp(t, b, prefix, build)
		hc := httpClient(t, nil)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := range 64 {
			a, path := []*app{a1, a2}[i%2], []string{"buy", "refund"}[(i/2)%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				if res := do(t, hc, "POST", a.srv.URL+"/products/42/"+path, nil, "X-User-ID", "u7"); res.status != http.StatusOK {
					failed.Add(1)
					t.Errorf("%s: %d %q", path, res.status, res.body)
				}
			}()
		}
		wg.Wait()
		if v := bad.Load(); v != nil {
			t.Fatal(v)
		}
		if n := x.overlaps.Load(); n != 0 || failed.Load() != 0 {
			t.Fatalf("%d overlaps, %d requests failed", n, failed.Load())
		}
		for _, k := range []lockcore.Key{key(t, "productID", "42"), key(t, "userID", "u7")} {
			eventually(t, 5*time.Second, "nothing held after the load", func() bool {
				info := inspect(t, a1.locker, k)
				return len(info.Holders) == 0 && len(info.Waiters) == 0
			})
		}

		// All or nothing: the buyer held elsewhere.
		ctx, cancel := context.WithCancel(context.Background())
		held := make(chan struct{})
		go func() {
			defer close(held)
			req, _ := http.NewRequestWithContext(ctx, "POST", a2.srv.URL+"/users/hold", nil)
			req.Header.Set("X-User-ID", "u7")
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		eventually(t, 5*time.Second, "the buyer held", func() bool { return len(inspect(t, a1.locker, key(t, "userID", "u7")).Holders) == 1 })
		if res := do(t, hc, "POST", a1.srv.URL+"/products/42/try", nil, "X-User-ID", "u7"); res.status != http.StatusConflict {
			t.Fatalf("a purchase whose buyer is held: %d %q, want 409", res.status, res.body)
		}
		if info := inspect(t, a1.locker, key(t, "productID", "42")); len(info.Holders) != 0 {
			t.Fatalf("the product is held after a purchase failed on its buyer: %+v", info.Holders)
		}
		cancel()
		<-held
	})
}

// TestGRPCSeveralResources: the same over gRPC: a method locking the
// product and then the buyer (from metadata), and another the reverse,
// 32 concurrent calls on two servers, all served, never overlapping.
func TestGRPCSeveralResources(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		var x exclusion
		product := interceptor.Field("product_id").As("productID")
		buyer := interceptor.Metadata("x-user-id").As("userID")
		serve := func(key keyfunc.Func) string {
			l := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix})
			t.Cleanup(func() { l.Close() })
			return serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
				keys := lock.Keys(ctx)
				if len(keys) != 2 {
					return nil, fmt.Errorf("holds %v", keys)
				}
				x.enter(keys)
				time.Sleep(200 * time.Microsecond)
				x.leave(keys)
				return shop.New("ReserveReply"), nil
			}}, grpc.ChainUnaryInterceptor(unaryServer(l, interceptor.Method(shop.Reserve, key, lock.Wait(20*time.Second)))))
		}
		addrs := []string{serve(product.Also(buyer)), serve(buyer.Also(product))}
		var wg sync.WaitGroup
		for i := range 32 {
			cc := dial(t, addrs[i%2])
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user-id", "u7")
				if _, err := reserve(ctx, cc, 42); err != nil {
					t.Errorf("call %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		if n := x.overlaps.Load(); n != 0 {
			t.Fatalf("%d overlaps", n)
		}
	})
}
