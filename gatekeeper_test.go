package lock_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestGatesOfObservedEngine: a Locker on an engine with gates, observed
// (FromEngine with Observe), has the engine's gates: a segmented route of
// a resource sold out answers 410 without its handler, and a nested
// segmented acquisition re-enters the request's segment instead of
// taking a second one.
func TestGatesOfObservedEngine(t *testing.T) {
	b := new(locktest.Engine)
	w := new(watcher)
	locker := lock.FromEngine(b, lock.Observe(w))
	if g := lifecycle.GatesOf(locker); g != lockcore.Gatekeeper(b) {
		t.Errorf("GatesOf = %v, want the backend's", g)
	}
	ctx := context.Background()
	product := key(t, "product", "7")
	outer, err := lifecycle.AcquireSegment(ctx, locker, product, lifecycle.Policy{Segments: 4, Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := lifecycle.AcquireSegment(outer.Context(), locker, product, lifecycle.Policy{Segments: 4, Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if inner.Key() != outer.Key() || !inner.ReenteredInMemory() {
		t.Errorf("nested segmented acquisition took %s (re-entered in memory: %v) under %s", inner.Key(), inner.ReenteredInMemory(), outer.Key())
	}
	_ = inner.Release(ctx)
	_ = outer.Release(ctx)

	var ran atomic.Int64
	r := chi.NewRouter()
	r.With(locker.ByParam("productID", lock.Segments(4), lock.FailFast())).Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) {
		ran.Add(1)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	sold := key(t, "productID", "42")
	if err := b.CloseGate(ctx, sold, 0); err != nil {
		t.Fatal(err)
	}
	if res := do(t, httpClient(t, nil), "POST", srv.URL+"/products/42/buy", nil); res.status != http.StatusGone || ran.Load() != 0 {
		t.Errorf("sold out: %d %q, handler ran %d times; want 410 without it", res.status, res.body, ran.Load())
	}
	if _, err := lifecycle.AcquireSegment(ctx, locker, sold, lifecycle.Policy{Segments: 4, Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrGateClosed) {
		t.Errorf("AcquireSegment of a sold-out resource: %v, want ErrGateClosed", err)
	}
}
