package lock_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
)

// TestRouteTTLAboveTheEngineBound: lock.TTL documents no ceiling (it
// panics only below 30ms; docs/configuration.md: "lease length"), and the
// README asks for a TTL longer than the handler's run plus a renewal
// period. A route given lock.TTL(45s) on lock.New's Locker, whose engine
// bounds leases by redisengine.Options.MaxTTL (30 s), must either run its
// handler or be refused where the route is built, as other configuration
// errors are; not answer 500 to every request of a route that was built
// and checked without complaint.
func TestRouteTTLAboveTheEngineBound(t *testing.T) {
	b := redistest.Best(t)
	rdb := redis.NewClient(&redis.Options{Addr: b.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	locker := lock.New(rdb)
	t.Cleanup(func() { _ = locker.Close() })

	r := chi.NewRouter()
	built := func() (built bool) {
		defer func() {
			if p := recover(); p != nil {
				if msg := fmt.Sprint(p); !strings.Contains(msg, "MaxTTL") {
					t.Errorf("the route was refused where it was built, without naming the bound to raise: %v", p)
				}
			}
		}()
		r.With(locker.ByParam("productID", lock.TTL(45*time.Second))).Post("/products/{productID}/buy", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusOK)
		})
		return true
	}()
	if !built {
		return // refused at startup: the configuration error is found where it is made
	}
	if err := locker.Check(t.Context()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("POST", "/products/42/buy", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("POST /products/42/buy with a 45 s route TTL: %d %q; want the handler to run", rec.Code, rec.Body.String())
	}
}
