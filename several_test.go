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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/lockotel"
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
			keys, fences := lock.Keys(r.Context()), lock.Fences(r.Context())
			if len(keys) != 2 || len(fences) != 2 || fences[0] <= 0 || fences[1] <= 0 {
				bad.Store(fmt.Sprintf("the handler holds %v with fences %v", keys, fences))
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

// TestHTTPSeveralResourcesAsUsersRunIt: a route naming two free
// resources, on a Locker as the README makes one (lock.New on a client at
// go-redis's defaults, observed by lockotel), takes them in one exchange
// with Redis and releases them in one; and the Locker's Defaults govern
// the lot: with a default of failing fast, a purchase whose buyer is held
// is refused at once, not after the 5 s default wait, and leaves the
// product free.
func TestHTTPSeveralResourcesAsUsersRunIt(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		trips := &redistest.Trips{}
		rdb.AddHook(trips)
		var inside atomic.Int64 // the count when the handler ran
		build := func(a *app) http.Handler {
			r := chi.NewRouter()
			product, buyer := keyfunc.Param("productID"), keyfunc.Header("X-User-ID").As("userID")
			r.With(a.locker.By(product.Also(buyer))).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
				inside.Store(trips.N())
			})
			r.With(a.locker.By(buyer, lock.Wait(time.Minute))).Post("/users/hold", func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
			})
			return r
		}
		a := newAppWith(t, rdb, redisengine.Options{Prefix: redistest.Prefix(t)}, build,
			lock.Observe(lockotel.New(lockotel.Config{})), lock.Defaults(lifecycle.Policy{Wait: lockcore.FailFast}))
		hc := httpClient(t, nil)
		buy := func() result {
			return do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil, "X-User-ID", "u7")
		}
		for range 2 { // reads the server's settings, loads the scripts
			if res := buy(); res.status != http.StatusOK {
				t.Fatalf("purchase: %d %q", res.status, res.body)
			}
		}
		for range 10 {
			before := trips.N()
			if res := buy(); res.status != http.StatusOK {
				t.Fatalf("purchase: %d %q", res.status, res.body)
			}
			in, after := inside.Load(), trips.N()
			if in-before != 1 || after-in != 1 {
				t.Fatalf("a purchase locked its two resources in %d exchanges with Redis and released them in %d, want 1 and 1", in-before, after-in)
			}
		}

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		held := make(chan struct{})
		go func() {
			defer close(held)
			req, _ := http.NewRequestWithContext(ctx, "POST", a.srv.URL+"/users/hold", nil)
			req.Header.Set("X-User-ID", "u7")
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		eventually(t, 5*time.Second, "the buyer held", func() bool { return len(inspect(t, a.locker, key(t, "userID", "u7")).Holders) == 1 })
		start := time.Now()
		if res := buy(); res.status != http.StatusConflict {
			t.Fatalf("a purchase whose buyer is held: %d %q, want 409", res.status, res.body)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("a purchase whose buyer is held, on a Locker that fails fast by default, was refused after %v", took)
		}
		if info := inspect(t, a.locker, key(t, "productID", "42")); len(info.Holders) != 0 {
			t.Fatalf("the product is held after a purchase failed on its buyer: %+v", info.Holders)
		}
		cancel()
		<-held
	})
}

// TestGRPCSeveralResourcesAsUsersRunIt: the same over gRPC, with the
// Locker given to the interceptor as the README does: two free resources
// in one exchange with Redis each way, and the Locker's default of failing
// fast refusing at once (Aborted) a call whose buyer is held, leaving the
// product free.
func TestGRPCSeveralResourcesAsUsersRunIt(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		trips := &redistest.Trips{}
		rdb.AddHook(trips)
		prefix := redistest.Prefix(t)
		l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix},
			lock.Observe(lockotel.New(lockotel.Config{})), lock.Defaults(lifecycle.Policy{Wait: lockcore.FailFast}))
		t.Cleanup(func() { l.Close() })
		other := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix})
		t.Cleanup(func() { other.Close() })
		var inside atomic.Int64
		product := interceptor.Field("product_id").As("productID")
		buyer := interceptor.Metadata("x-user-id").As("userID")
		addr := serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			inside.Store(trips.N())
			return shop.New("ReserveReply"), nil
		}}, grpc.ChainUnaryInterceptor(unaryServer(l, interceptor.Method(shop.Reserve, product.Also(buyer)))))
		cc := dial(t, addr)
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user-id", "u7")
		for range 2 { // reads the server's settings, loads the scripts
			if _, err := reserve(ctx, cc, 42); err != nil {
				t.Fatal(err)
			}
		}
		for range 10 {
			before := trips.N()
			if _, err := reserve(ctx, cc, 42); err != nil {
				t.Fatal(err)
			}
			in, after := inside.Load(), trips.N()
			if in-before != 1 || after-in != 1 {
				t.Fatalf("a call locked its two resources in %d exchanges with Redis and released them in %d, want 1 and 1", in-before, after-in)
			}
		}

		ls, err := other.Acquire(context.Background(), key(t, "userID", "u7"), lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer ls.Release(context.Background())
		start := time.Now()
		if _, err := reserve(ctx, cc, 42); status.Code(err) != codes.Aborted {
			t.Fatalf("a call whose buyer is held: %v, want Aborted", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("a call whose buyer is held, on a Locker that fails fast by default, was refused after %v", took)
		}
		if info := inspect(t, l, key(t, "productID", "42")); len(info.Holders) != 0 {
			t.Fatalf("the product is held after a call failed on its buyer: %+v", info.Holders)
		}
	})
}
