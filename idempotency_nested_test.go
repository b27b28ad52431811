package lock_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// TestIdempotencyNestedCallSameInstance: a call nested in an idempotent
// request, to the same route with the same key and the request's owner
// token (middleware.Transport, taken in by the route's lock of its
// account), that lands on the same instance, is the
// request's duplicate in progress: it gets 409 at once, as one landing
// on another instance does (TestIdempotencyNestedCallInProgress), rather
// than waiting in memory for the request it is nested in, which waits for
// it, until its wait runs out.
func TestIdempotencyNestedCallSameInstance(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
	t.Cleanup(func() { _ = l.Close() })
	type nestedAnswer struct {
		status int
		took   time.Duration
	}
	nested := make(chan nestedAnswer, 1)
	var self string
	r := chi.NewRouter()
	r.With(l.ByParam("account"), l.Idempotent(lock.Wait(4*time.Second))).Post("/accounts/{account}/transfers", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Nested") == "" {
			req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, self+r.URL.Path, strings.NewReader("100"))
			req.Header.Set("Idempotency-Key", r.Header.Get("Idempotency-Key"))
			req.Header.Set("X-Nested", "1")
			start := time.Now()
			resp, err := (&http.Client{Transport: middleware.Transport(nil)}).Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			nested <- nestedAnswer{resp.StatusCode, time.Since(start)}
		}
		fmt.Fprint(w, "moved")
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	self = srv.URL
	if a := idemPost(t, srv.Client(), srv.URL+"/accounts/a-1/transfers", "same-1", "100"); a.status != http.StatusOK {
		t.Fatalf("the outer call: %d %s", a.status, a.body)
	}
	got := <-nested
	if got.status != http.StatusConflict || got.took > time.Second {
		t.Errorf("the nested call on the same instance: %d after %v; want 409 at once", got.status, got.took)
	}
}
