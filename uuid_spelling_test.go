package lock_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestUUIDSpellings: a handler that parses its ID with
// github.com/google/uuid (the module's own dependency, and the usual Go
// UUID library) reads the 32-digit form without hyphens, the braced form
// and the urn:uuid: form as the same UUID as the 8-4-4-4-12 one. While order
// 3f2504e0-… is held, each of those spellings must get 409 and its handler
// must not run (each was a key of its own, and the handler ran beside the
// holder, on the same order).
func TestUUIDSpellings(t *testing.T) {
	runUserClients(t, func(t *testing.T, b *redistest.Backend, mk func() redis.UniversalClient) {
		prefix := redistest.Prefix(t)
		const id = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
		ran := map[string]bool{}
		a := newAppOn(t, mk(), prefix, func(a *app) http.Handler {
			r := chi.NewRouter()
			r.With(a.locker.ByParam("orderID", lock.FailFast())).Post("/orders/{orderID}/cancel", func(w http.ResponseWriter, r *http.Request) {
				u, err := uuid.Parse(chi.URLParam(r, "orderID"))
				if err != nil {
					http.Error(w, "bad id", http.StatusBadRequest)
					return
				}
				ran[u.String()] = true // the order the handler acts on
			})
			return r
		})
		other := lock.NewRedis(mk(), redisengine.Options{Prefix: prefix})
		defer other.Close()
		lease, err := other.Acquire(context.Background(), key(t, "orderID", id), lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
		hc := httpClient(t, nil)
		for _, s := range []string{
			"3f2504e04f8911d39a0c0305e82c3301",
			"%7B3f2504e0-4f89-11d3-9a0c-0305e82c3301%7D",
			"urn:uuid:3f2504e0-4f89-11d3-9a0c-0305e82c3301",
		} {
			ran = map[string]bool{}
			res := do(t, hc, "POST", a.srv.URL+"/orders/"+s+"/cancel", nil)
			if res.status != http.StatusConflict || ran[id] {
				t.Errorf("/orders/%s/cancel while order %s is held: %d, the handler acted on order %s: %v; want 409 and no handler", s, id, res.status, id, ran[id])
			}
		}
	})
}

// TestUUIDSpellingsSegmented: on a segmented route the same holds: while
// every segment of order 3f2504e0-… is held (by another instance, through
// lifecycle.AcquireSegment on the canonical key), each other spelling of
// the UUID gets 409 and its handler does not run; on every deployment,
// with the clients users run (go-redis defaults, and with context
// deadlines).
func TestUUIDSpellingsSegmented(t *testing.T) {
	runUserClients(t, func(t *testing.T, b *redistest.Backend, mk func() redis.UniversalClient) {
		prefix := redistest.Prefix(t)
		const id = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
		var ran atomic.Bool
		a := newAppOn(t, mk(), prefix, func(a *app) http.Handler {
			r := chi.NewRouter()
			r.With(a.locker.ByParam("orderID", lock.FailFast(), lock.Segments(2))).Post("/orders/{orderID}/cancel", func(w http.ResponseWriter, r *http.Request) {
				ran.Store(true)
			})
			return r
		})
		other := lock.NewRedis(mk(), redisengine.Options{Prefix: prefix})
		defer other.Close()
		for range 2 {
			lease, err := lifecycle.AcquireSegment(context.Background(), other, key(t, "orderID", id), lifecycle.Policy{Wait: lockcore.FailFast, Segments: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Release(context.Background())
		}
		hc := httpClient(t, nil)
		for _, s := range []string{
			id,
			"3F2504E0-4F89-11D3-9A0C-0305E82C3301",
			"3f2504e04f8911d39a0c0305e82c3301",
			"%7B3f2504e0-4f89-11d3-9a0c-0305e82c3301%7D",
			"urn:uuid:3f2504e0-4f89-11d3-9a0c-0305e82c3301",
		} {
			ran.Store(false)
			res := do(t, hc, "POST", a.srv.URL+"/orders/"+s+"/cancel", nil)
			if res.status != http.StatusConflict || ran.Load() {
				t.Errorf("/orders/%s/cancel while every segment of order %s is held: %d, handler ran %v; want 409 and no handler", s, id, res.status, ran.Load())
			}
		}
	})
}
