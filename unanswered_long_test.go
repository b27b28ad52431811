//go:build long

package lock_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestNewInstanceRefusesWithinTimeoutWhenRedisDoesNotAnswer: a newly
// started instance whose Redis does not answer (a partition, a stalled
// server) answers a locked request 503 within redisengine.Options.Timeout,
// "whatever the client's own timeouts and retries", as an instance that
// has served requests before does. The first read of the sold-out gates,
// which a new instance's first acquisitions wait for, must be bounded by
// the same Timeout: with go-redis at its defaults (which ignores context
// deadlines) it is not, and with the README's client it is waited for
// twice.
func TestNewInstanceRefusesWithinTimeoutWhenRedisDoesNotAnswer(t *testing.T) {
	const timeout = 500 * time.Millisecond
	b := redistest.Best(t)
	for _, tc := range []struct {
		name string
		opts redis.Options
	}{
		{"go-redis defaults", redis.Options{}},
		{"the README's client", redis.Options{ContextTimeoutEnabled: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := faultproxy.Start(t, b.Addr)
			p.Blackhole(true)
			o := tc.opts
			o.Addr = p.Addr
			rdb := redis.NewClient(&o)
			t.Cleanup(func() { _ = rdb.Close() })
			locker := lock.NewRedis(rdb, redisengine.Options{Timeout: timeout})
			t.Cleanup(func() { _ = locker.Close() })
			t.Cleanup(func() { p.Blackhole(false) }) // before Close: the calls under way land

			ran := false
			r := chi.NewRouter()
			r.With(locker.ByParam("productID", lock.FailFast())).Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) { ran = true })
			for i := range 2 {
				start := time.Now()
				rec := httptest.NewRecorder()
				r.ServeHTTP(rec, httptest.NewRequest("POST", "/products/42/buy", nil))
				took := time.Since(start)
				t.Logf("request %d: %d after %v", i, rec.Code, took.Round(time.Millisecond))
				if rec.Code != http.StatusServiceUnavailable || ran {
					t.Errorf("request %d: status %d, handler ran %v; want 503 and no handler", i, rec.Code, ran)
				}
				if took > timeout+300*time.Millisecond {
					t.Errorf("request %d: answered after %v, want within Options.Timeout %v (+300ms)", i, took.Round(time.Millisecond), timeout)
				}
			}
		})
	}
}
