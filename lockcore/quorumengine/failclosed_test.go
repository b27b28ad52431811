package quorumengine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/faultproxy"
)

// TestTwoMastersLostFailsClosed: with two masters of three lost, down
// (connections refused: at once) or cut off (no answer: when its route's
// wait ends), a request through the HTTP middleware gets 503 and its
// handler does not run; with one lost, it runs.
func TestTwoMastersLostFailsClosed(t *testing.T) {
	t.Parallel() // its faults are its own proxies'; it waits out timeouts
	cs := masters(t, 3)
	var proxied []redis.UniversalClient
	var proxies []*faultproxy.Proxy
	for _, c := range cs {
		pc, p := through(t, c)
		proxied, proxies = append(proxied, pc), append(proxies, p)
	}
	e := newEngine(t, proxied, Options{Prefix: "failclosed:", Timeout: 200 * time.Millisecond})
	locker := lock.FromEngine(e)
	var ran atomic.Int64
	r := chi.NewRouter()
	r.With(locker.ByParam("productID", lock.Wait(time.Second))).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
	})
	var deadline time.Duration // the request's, when not 0
	buy := func() int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/products/42/buy", nil)
		if deadline > 0 {
			ctx, cancel := context.WithTimeout(req.Context(), deadline)
			defer cancel()
			req = req.WithContext(ctx)
		}
		r.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := buy(); code != http.StatusOK || ran.Load() != 1 {
		t.Fatalf("all masters up: %d, handler ran %d times; want 200, once", code, ran.Load())
	}
	if err := proxies[0].Down(true); err != nil {
		t.Fatal(err)
	}
	if code := buy(); code != http.StatusOK || ran.Load() != 2 {
		t.Fatalf("one master down: %d, handler ran %d times in all; want 200, twice", code, ran.Load())
	}
	for _, lose := range []struct {
		name string
		do   func(p *faultproxy.Proxy)
	}{
		{"down", func(p *faultproxy.Proxy) { _ = p.Down(true) }},
		{"cut off", func(p *faultproxy.Proxy) { p.Blackhole(true) }},
		{"cut off, the request's deadline before its wait's end", func(p *faultproxy.Proxy) { p.Blackhole(true); deadline = 300 * time.Millisecond }},
	} {
		lose.do(proxies[1])
		start := time.Now()
		if code := buy(); code != http.StatusServiceUnavailable || ran.Load() != 2 {
			t.Fatalf("two masters lost (%s): %d, handler ran %d times in all; want 503, and not again", lose.name, code, ran.Load())
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("two masters lost (%s): 503 after %v", lose.name, d)
		}
		proxies[1].Heal()
	}
	for _, p := range proxies {
		p.Heal()
	}
}
