package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/middleware"
)

// TestCheckAcceptsAWildcardRoute: a lock on chi's catch-all parameter
// ("*", which chi.URLParam and keyfunc.Param read) of a wildcard route
// locks every request of the route, and Check, which names only the locks
// whose routes cannot name their key, must not stop the program over it.
func TestCheckAcceptsAWildcardRoute(t *testing.T) {
	e := enginetest.New()
	ran := 0
	r := chi.NewRouter()
	r.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("*")})).
		Put("/files/*", func(http.ResponseWriter, *http.Request) { ran++ })

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("PUT", "/files/reports/2024.csv", nil))
	if rec.Code != http.StatusOK || ran != 1 {
		t.Fatalf("PUT /files/reports/2024.csv: status %d, handler ran %d times; want 200, once", rec.Code, ran)
	}
	if err := middleware.Check(r); err != nil {
		t.Errorf("Check: %v; want nil: the route's requests are locked on its wildcard", err)
	}

	// The same lock router-wide: the wildcard route is locked, others pass.
	wide := chi.NewRouter()
	wide.Use(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("*")}))
	wide.Put("/files/*", func(http.ResponseWriter, *http.Request) { ran++ })
	rec = httptest.NewRecorder()
	wide.ServeHTTP(rec, httptest.NewRequest("PUT", "/files/reports/2024.csv", nil))
	if rec.Code != http.StatusOK || ran != 2 {
		t.Fatalf("router-wide: PUT /files/reports/2024.csv: status %d, handler ran %d times in all; want 200, twice", rec.Code, ran)
	}
	if err := middleware.Check(wide); err != nil {
		t.Errorf("Check of the router-wide lock: %v; want nil", err)
	}
}
