package lockotel_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
)

// TestIdempotencyCounted: an idempotent route's first request, its retry
// and a reuse of its key with another payload are counted by outcome and
// route, with the bytes stored; no attribute carries the key.
func TestIdempotencyCounted(t *testing.T) {
	mr := miniredis.RunT(t)
	r := newRig(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	locker := lock.New(rdb, lock.Observe(r.tel))
	t.Cleanup(func() { locker.Close() })
	router := chi.NewRouter()
	router.With(locker.Idempotent()).Post("/payments/{account}", func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.WriteString(w, "paid")
	})
	srv := serve(t, router)
	send := func(body string) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments/a1", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "k-secret-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b, c := send("5"), send("5"), send("6"); a != 200 || b != 200 || c != 422 {
		t.Fatalf("first, retry, other payload: %d %d %d, want 200 200 422", a, b, c)
	}
	m := r.collect(t)
	const route = "/payments/{account}"
	for _, o := range []string{"stored", "replayed", "mismatch"} {
		m.wantSum(t, "routelock.idempotency.requests", 1, "lock.route", route, "lock.outcome", o)
	}
	m.wantSum(t, "routelock.idempotency.requests", 0, "lock.route", route, "lock.outcome", "conflict")
	if n, ok := m.sum(t, "routelock.idempotency.stored", "lock.route", route); !ok || n < int64(len("paid")) || n > 200 {
		t.Fatalf("stored bytes %d (%v), want the result's few bytes", n, ok)
	}
	if s := m.points("routelock.idempotency.requests"); strings.Contains(s, "k-secret") {
		t.Fatalf("an attribute carries the key: %s", s)
	}
}
