package lock_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestDefaultsMaxHoldNotLiftedByRoute: a Defaults ceiling is not lifted by
// a route's longer MaxHold, only shortened (lock.Policy.MaxHold,
// docs/configuration.md): the handler's context ends at the Locker's
// ceiling with ErrMaxHold.
func TestDefaultsMaxHoldNotLiftedByRoute(t *testing.T) {
	locker := lock.FromEngine(new(locktest.Engine), lock.Defaults(lock.MaxHold(50*time.Millisecond)))
	cause := make(chan error, 1)
	r := chi.NewRouter()
	r.With(locker.ByParam("productID", lock.MaxHold(time.Hour))).Post("/products/{productID}/restock", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			cause <- context.Cause(r.Context())
		case <-time.After(3 * time.Second):
			cause <- nil
		}
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	do(t, httpClient(t, nil), "POST", srv.URL+"/products/42/restock", nil)
	if err := <-cause; !errors.Is(err, lockcore.ErrMaxHold) {
		t.Fatalf("the handler's context after 3s under a 50ms Defaults ceiling: %v, want ErrMaxHold", err)
	}
}

// TestDefaultsMaxHoldNotLiftedByAcquire: the same through Locker.Acquire.
func TestDefaultsMaxHoldNotLiftedByAcquire(t *testing.T) {
	locker := lock.FromEngine(new(locktest.Engine), lock.Defaults(lock.MaxHold(50*time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ls, err := locker.Acquire(ctx, key(t, "productID", "42"), lock.MaxHold(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(context.Background())
	<-ls.Context().Done()
	if err := context.Cause(ls.Context()); !errors.Is(err, lockcore.ErrMaxHold) {
		t.Fatalf("the lease's context after 3s under a 50ms Defaults ceiling: %v, want ErrMaxHold", err)
	}
}
