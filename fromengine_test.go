package lock_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/lockcore/redisengine"
)

// recording is the in-memory engine that writes down the Policy of every
// acquisition.
type recording struct {
	*locktest.Engine
	mu       sync.Mutex
	policies []lockcore.Policy
}

func (r *recording) Acquire(ctx context.Context, key lockcore.Key, p lockcore.Policy) (*lockcore.Lease, error) {
	r.mu.Lock()
	r.policies = append(r.policies, p)
	r.mu.Unlock()
	return r.Engine.Acquire(ctx, key, p)
}

// TestFromEngine checks the promise of lock.FromEngine: a Locker on any
// engine gets the Locker's options (here fail fast) on its routes, its
// nested calls re-enter through lock.Transport, its Close leaves the engine
// alone, and the Redis engine's own options are refused there.
func TestFromEngine(t *testing.T) {
	e := &recording{Engine: new(locktest.Engine)}
	locker := lock.FromEngine(e, lock.FailFast(), lock.TTL(time.Minute))
	if locker.Engine() != lockcore.Engine(e) {
		t.Fatal("Engine() is not the engine given")
	}
	hc := &http.Client{Transport: lock.Transport(nil), Timeout: 10 * time.Second}
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
	if len(calls) != 2 || calls[0] != (lockcore.Policy{TTL: time.Minute}) {
		t.Fatalf("engine calls %+v, want two with the Locker's fail-fast policy and TTL", calls)
	}

	key, _ := lockcore.NewKey("productID", "42")
	held, err := e.Acquire(ctx, key, lockcore.Policy{})
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

	for name, opt := range map[string]lock.Option{
		"Prefix":       lock.Prefix("x:"),
		"RedisOptions": lock.RedisOptions(redisengine.Options{}),
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, name) {
					t.Errorf("FromEngine with %s: panic %v, want one naming it", name, r)
				}
			}()
			lock.FromEngine(e, opt)
		}()
	}
}
