package lock_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// TestNestedLocksOuterDecides checks the README's HTTP snippet and the rule
// it states, on a default client: /reserve, outside the router-wide lock,
// fails fast (one of two concurrent requests gets 409); /buy, under it,
// waits (both 200); and where a router-wide lock and a route's FailFast lock
// name one resource, the outer one decides: the second request waits
// instead of getting 409.
func TestNestedLocksOuterDecides(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		locker := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
		t.Cleanup(func() { _ = locker.Close() })
		lock.SetDefault(locker)
		t.Cleanup(func() { lock.SetDefault(nil) })

		entered := make(chan struct{}, 2)
		release := make(chan struct{})
		hold := func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}

		// The README's snippet, handlers aside.
		r := chi.NewRouter()
		r.Get("/health", func(http.ResponseWriter, *http.Request) {})
		r.Group(func(r chi.Router) {
			// The README's first block is the next line, byte for byte
			// (TestReadmeGoBlocksCompiled).
			r.Use(lock.ByParam("productID"))
			r.Post("/products/{productID}/buy", hold)
			r.Post("/products/{productID}/refund", hold)
		})
		r.With(locker.ByParam("productID", lock.FailFast())).Post("/products/{productID}/reserve", hold)
		// The rule: an outer lock and an inner fail-fast one on one resource.
		r.Route("/nested", func(r chi.Router) {
			r.Use(lock.ByParam("productID"))
			r.With(locker.ByParam("productID", lock.FailFast())).Post("/{productID}", hold)
		})
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		hc := &http.Client{Timeout: 10 * time.Second}

		// pair sends two requests to path; the second starts once the first
		// holds the lock, and the first is let go once the second has its
		// answer or is waiting.
		pair := func(path string, secondWaits bool) (int, int) {
			t.Helper()
			ctx := context.Background()
			codes := make(chan int, 2)
			send := func() {
				code, err := post(ctx, hc, srv.URL+path)
				if err != nil {
					t.Error(err)
				}
				codes <- code
			}
			go send()
			<-entered
			go send()
			var second int
			if secondWaits {
				// It cannot enter while the first holds; let the first go
				// after a bounded look for an early answer.
				select {
				case second = <-codes:
				case <-time.After(300 * time.Millisecond):
				}
			} else {
				second = <-codes
			}
			release <- struct{}{}
			first := <-codes
			if second == 0 {
				<-entered
				release <- struct{}{}
				second = <-codes
			}
			return first, second
		}

		if a, b := pair("/products/42/reserve", false); a != http.StatusOK || b != http.StatusConflict {
			t.Errorf("README /reserve, fail fast: %d and %d, want 200 and 409", a, b)
		}
		if a, b := pair("/products/42/buy", true); a != http.StatusOK || b != http.StatusOK {
			t.Errorf("README /buy, waiting: %d and %d, want 200 and 200", a, b)
		}
		if a, b := pair("/nested/42", true); a != http.StatusOK || b != http.StatusOK {
			t.Errorf("outer wait around inner fail fast: %d and %d, want 200 and 200 (the outer decides)", a, b)
		}
		resp, err := hc.Get(srv.URL + "/health")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/health: %v %v", resp, err)
		}
		resp.Body.Close()
	})
}

// TestMethodsLetReadsThrough: a router-wide lock that takes only writes
// (middleware.Config.Methods) lets GET /products/42 run while a purchase holds product
// 42, where before every read queued behind it; a second purchase still
// waits for the first.
func TestMethodsLetReadsThrough(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		locker := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
		t.Cleanup(func() { _ = locker.Close() })
		entered := make(chan struct{}, 2)
		release := make(chan struct{})
		var reads atomic.Int32
		r := chi.NewRouter()
		r.Use(middleware.Lock(locker, middleware.Config{
			Key:     keyfunc.Param("productID"),
			Methods: []string{"POST", "PUT", "PATCH", "DELETE"},
		}))
		r.Post("/products/{productID}", func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			<-release
		})
		r.Get("/products/{productID}", func(w http.ResponseWriter, r *http.Request) {
			reads.Add(1)
			if _, held := lock.FencingToken(r.Context()); held {
				http.Error(w, "read took the lock", http.StatusInternalServerError)
			}
		})
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		hc := &http.Client{Timeout: 10 * time.Second}
		ctx := context.Background()

		first := make(chan int, 1)
		go func() { code, _ := post(ctx, hc, srv.URL+"/products/42"); first <- code }()
		<-entered
		resp, err := hc.Get(srv.URL + "/products/42") // while the purchase holds 42
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET during a held POST: %v %v, want 200 at once", resp, err)
		}
		resp.Body.Close()
		second := make(chan int, 1)
		go func() { code, _ := post(ctx, hc, srv.URL+"/products/42"); second <- code }()
		select {
		case <-entered:
			t.Fatal("a second POST entered beside the first")
		case <-time.After(200 * time.Millisecond): // a bounded look: it must be waiting
		}
		release <- struct{}{}
		<-entered
		release <- struct{}{}
		if a, b := <-first, <-second; a != http.StatusOK || b != http.StatusOK {
			t.Fatalf("POSTs: %d %d", a, b)
		}
		if reads.Load() != 1 {
			t.Fatalf("reads %d", reads.Load())
		}
	})
}
