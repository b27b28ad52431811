package lock_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// keeper is an Observer that keeps the last Policy it was given.
type keeper struct {
	mu sync.Mutex
	p  lock.Policy
}

func (k *keeper) Observe(ctx context.Context, keys []lockcore.Key, p lock.Policy, acquire func(context.Context, lock.Policy) ([]*lock.Lease, error)) ([]*lock.Lease, error) {
	k.mu.Lock()
	k.p = p
	k.mu.Unlock()
	return acquire(ctx, p)
}

func (k *keeper) Events() lockcore.Events { return nil }

// TestObservedPolicyValidatedWhenChanged: an Observer is given the
// Policy of each acquisition, a plain value with exported fields. Changed
// by its holder into an invalid one and given to Locker.Acquire, it must be
// refused (ErrMisconfigured) as the same fields written by hand are: a
// Policy's validity is in its fields, not in where the value came from.
func TestObservedPolicyValidatedWhenChanged(t *testing.T) {
	ctx := context.Background()
	b := new(locktest.Engine)
	defer b.Close()
	kp := new(keeper)
	l := lock.FromEngine(b, lock.Observe(kp))
	r := chi.NewRouter()
	r.With(l.ByParam("productID", lock.FailFast())).Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) {})
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("POST", "/products/1/buy", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("buy: %d %s", rec.Code, rec.Body)
	}
	kp.mu.Lock()
	seen := kp.p
	kp.mu.Unlock()

	k, err := lockcore.NewKey("productID", "2")
	if err != nil {
		t.Fatal(err)
	}
	byHand := lock.Policy{Wait: seen.Wait, Route: seen.Route, TTL: time.Nanosecond}
	if _, err := l.Acquire(ctx, k, byHand); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("a 1ns TTL written by hand: %v, want ErrMisconfigured", err)
	}
	changed := seen
	changed.TTL = time.Nanosecond // the same fields as byHand
	ls, err := l.Acquire(ctx, k, changed)
	if err == nil {
		_ = ls.Release(ctx)
	}
	if !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("the observed Policy with a 1ns TTL: %v, want ErrMisconfigured as for the same fields written by hand", err)
	}
}
