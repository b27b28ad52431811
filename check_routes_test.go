package lock_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/middleware"
)

// TestCheckFindsPackageLevelAndLockerLocks: middleware.Check finds a
// misspelt parameter in the package-level lock.ByParam, which builds its
// middleware per request, and in a Locker's, before any request.
func TestCheckFindsPackageLevelAndLockerLocks(t *testing.T) {
	locker := lock.FromEngine(new(locktest.Engine))
	ok := func(http.ResponseWriter, *http.Request) {}
	r := chi.NewRouter()
	r.With(lock.ByParam("productId")).Post("/products/{productID}/buy", ok)
	r.With(locker.ByParam("userId", lock.FailFast())).Post("/users/{userID}/checkout", ok)
	r.With(locker.ByParam("productID")).Post("/products/{productID}/refund", ok)
	err := middleware.Check(r)
	if !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("Check: %v, want ErrMisconfigured", err)
	}
	for _, want := range []string{"POST /products/{productID}/buy", "{productId}", "POST /users/{userID}/checkout", "{userId}"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check's error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "refund") {
		t.Errorf("Check names a route whose pattern has its parameter:\n%v", err)
	}
}
