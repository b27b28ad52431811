package lock_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/middleware"
)

// recording is the in-memory engine that writes down what of the Policy
// every acquisition asks it for: its wait, lease and route.
type recording struct {
	*locktest.Engine
	mu       sync.Mutex
	policies []lifecycle.Policy
}

func (r *recording) Take(ctx context.Context, q lockcore.Request) (lockcore.Hold, error) {
	r.mu.Lock()
	r.policies = append(r.policies, lifecycle.Policy{Wait: q.Wait, TTL: q.TTL, Route: q.Route})
	r.mu.Unlock()
	return r.Engine.Take(ctx, q)
}

// TestFromEngine checks the promise of lock.FromEngine: a Locker on any
// engine gets the Locker's options (here fail fast) on its routes, its
// nested calls re-enter through middleware.Transport, and its Close leaves the
// engine alone.
func TestFromEngine(t *testing.T) {
	e := &recording{Engine: new(locktest.Engine)}
	locker := lock.FromEngine(e, lock.Defaults(lock.FailFast(), lock.TTL(time.Minute)))
	if locker.Backend() != lockcore.Engine(e) {
		t.Fatal("the Locker's engine is not the engine given")
	}
	hc := &http.Client{Transport: middleware.Transport(nil), Timeout: 10 * time.Second}
	var srvURL atomic.Value
	var nested atomic.Int32
	r := chi.NewRouter()
	r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		code, err := post(r.Context(), hc, srvURL.Load().(string)+"/products/42/reserve")
		if err != nil || code != http.StatusOK {
			http.Error(w, "nested call", http.StatusBadGateway)
		}
	})
	r.With(locker.ByParam("productID")).Post("/products/{productID}/reserve", func(w http.ResponseWriter, r *http.Request) {
		nested.Add(1)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	srvURL.Store(srv.URL)
	ctx := context.Background()

	if code, err := post(ctx, hc, srv.URL+"/products/42/buy"); err != nil || code != http.StatusOK {
		t.Fatalf("buy with a nested reserve on the same product: %d %v, want 200 (re-entry)", code, err)
	}
	if nested.Load() != 1 {
		t.Fatalf("nested handler ran %d times", nested.Load())
	}
	e.mu.Lock()
	calls := e.policies
	e.mu.Unlock()
	if len(calls) != 2 || calls[0] != (lifecycle.Policy{Wait: lockcore.FailFast, TTL: time.Minute, Route: "/products/{productID}/buy"}) {
		t.Fatalf("engine calls %+v, want two with the Locker's fail-fast policy and TTL", calls)
	}

	key, _ := lockcore.NewKey("productID", "42")
	held, err := lifecycle.Serve(e, nil).Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := post(ctx, hc, srv.URL+"/products/42/buy"); err != nil || code != http.StatusConflict {
		t.Fatalf("buy while another owner holds the product: %d %v, want 409 (fail fast)", code, err)
	}
	if err := locker.Close(); err != nil {
		t.Fatal(err)
	}
	if err := held.Err(); err != nil {
		t.Fatalf("Close of a FromEngine Locker touched the engine's holds: %v", err)
	}
	_ = held.Release(ctx)

}

// TestPolicyCrossesUnchanged: the Policy a route or gRPC method is given
// (lock.Wait, lock.TTL) is the Policy the engine's Acquire receives: one
// shape from the option to the engine, with only the zero fields filled in
// from the Locker's Defaults, and Route set for gRPC (the method) and for
// an engine that records routes or shows them to operators (an Operator,
// as locktest.Engine is).
func TestPolicyCrossesUnchanged(t *testing.T) {
	e := &recording{Engine: new(locktest.Engine)}
	locker := lock.FromEngine(e, lock.Defaults(lock.TTL(30*time.Second)))
	plain := lock.FromEngine(e)

	r := chi.NewRouter()
	r.With(plain.ByParam("productID", lock.Wait(2*time.Second))).Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) {})
	r.With(locker.ByParam("productID", lock.Wait(2*time.Second))).Post("/products/{productID}/refund", func(http.ResponseWriter, *http.Request) {})
	r.With(locker.ByParam("productID", lock.FailFast(), lock.TTL(time.Minute))).Post("/products/{productID}/reserve", func(http.ResponseWriter, *http.Request) {})
	r.With(locker.ByParam("productID", lock.Wait(time.Second), lock.Wait(3*time.Second))).Post("/products/{productID}/hold", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(r)
	defer srv.Close()
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"buy", "refund", "reserve", "hold"} {
		if code, err := post(context.Background(), hc, srv.URL+"/products/42/"+path); err != nil || code != http.StatusOK {
			t.Fatalf("POST %s: %d %v", path, code, err)
		}
	}

	gsrv := &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		return shop.New("ReserveReply"), nil
	}}
	cc := dial(t, serveGRPC(t, gsrv, grpc.ChainUnaryInterceptor(unaryServer(locker,
		interceptor.Method(shop.Reserve, interceptor.Field("product_id"), lock.Wait(2*time.Second))))))
	if _, err := reserve(context.Background(), cc, 42); err != nil {
		t.Fatal(err)
	}

	want := []lifecycle.Policy{
		{Wait: 2 * time.Second, Route: "/products/{productID}/buy"},
		{Wait: 2 * time.Second, TTL: 30 * time.Second, Route: "/products/{productID}/refund"},
		{Wait: lockcore.FailFast, TTL: time.Minute, Route: "/products/{productID}/reserve"},
		{Wait: 3 * time.Second, TTL: 30 * time.Second, Route: "/products/{productID}/hold"},
		{Wait: 2 * time.Second, TTL: 30 * time.Second, Route: shop.Reserve},
	}
	e.mu.Lock()
	got := slices.Clone(e.policies)
	e.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("the engine received\n%+v\nwant\n%+v", got, want)
	}
}

// labelled is an engine of one's own passed by value, as a small wrapper
// may be: it is not comparable (its labels are a slice).
type labelled struct {
	*locktest.Engine
	labels []string
}

// TestFromEngineUncomparable: a Locker on an engine value that cannot be
// compared guards a route as any other, and re-enters its own holds in
// memory.
func TestFromEngineUncomparable(t *testing.T) {
	locker := lock.FromEngine(labelled{Engine: new(locktest.Engine), labels: []string{"shop"}})
	var ran atomic.Int64
	r := chi.NewRouter()
	r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(_ http.ResponseWriter, r *http.Request) {
		k, _ := lockcore.NewKey("productID", "42")
		in, err := locker.Acquire(r.Context(), k, lock.FailFast())
		if err != nil || !in.ReenteredInMemory() {
			t.Errorf("nested acquisition: %v, want an in-memory re-entry", err)
			return
		}
		_ = in.Release(r.Context())
		ran.Add(1)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	if res := do(t, httpClient(t, nil), "POST", srv.URL+"/products/42/buy", nil); res.status != http.StatusOK || ran.Load() != 1 {
		t.Fatalf("%d %q, handler ran %d times", res.status, res.body, ran.Load())
	}
}

// tagged is an engine whose type can be compared but whose values may not
// be: its tag is an interface, here holding a slice.
type tagged struct {
	*locktest.Engine
	tag any
}

// TestFromEngineUncomparableValue: two Lockers on an engine value that
// cannot be compared (though its type can) do not panic when a request
// holds a key through one and takes it through the other: not knowing
// them for one engine, the second re-enters by the owner token the
// context carries, in the engine, with the same fence.
func TestFromEngineUncomparableValue(t *testing.T) {
	e := tagged{Engine: new(locktest.Engine), tag: []string{"shop"}}
	a, b := lock.FromEngine(e), lock.FromEngine(e)
	ctx := context.Background()
	k, err := lockcore.NewKey("productID", "42")
	if err != nil {
		t.Fatal(err)
	}
	outer, err := a.Acquire(ctx, k, lock.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Release(ctx)
	inner, err := b.Acquire(outer.Context(), k, lock.FailFast())
	if err != nil {
		t.Fatalf("nested acquisition through the second Locker: %v", err)
	}
	defer inner.Release(ctx)
	if inner.ReenteredInMemory() || !inner.Reentered() || inner.Fence() != outer.Fence() {
		t.Fatalf("nested acquisition: in memory %v, re-entered %v, fence %d (outer %d); want a re-entry by token with the outer fence",
			inner.ReenteredInMemory(), inner.Reentered(), inner.Fence(), outer.Fence())
	}
}
