package lock_test

import (
	"context"
	"io"
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

// TestReleaseTimeoutBoundsResponse checks the promise that a locked route
// answers within the engine's ReleaseTimeout of its handler's end however
// long the client would take: the Redis of a route behind ByParam is
// blackholed while the handler runs, on a go-redis client at its defaults
// (MaxRetries 3, ReadTimeout 3 s, ContextTimeoutEnabled false), and the
// response, which the release after the handler holds back, must arrive
// within ReleaseTimeout plus slack. The proxy works on both backends.
func TestReleaseTimeoutBoundsResponse(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		const releaseTimeout = 300 * time.Millisecond
		const slack = 250 * time.Millisecond
		p := faultproxy.Start(t, b.Addr)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		locker := lock.NewRedis(rdb, redisengine.Options{ReleaseTimeout: releaseTimeout, Prefix: redistest.Prefix(t)})
		entered, finish := make(chan struct{}), make(chan struct{})
		r := chi.NewRouter()
		r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			select {
			case <-finish:
			case <-time.After(10 * time.Second): // the test failed before
			}
			_, _ = io.WriteString(w, "bought")
		})
		srv := httptest.NewServer(r)
		t.Cleanup(func() {
			srv.Close()
			_ = locker.Close()
		})
		t.Cleanup(p.Close) // first: a release stuck on the blackhole ends
		hc := httpClient(t, nil)

		type response struct {
			status int
			at     time.Time
			err    error
		}
		got := make(chan response, 1)
		go func() {
			req, err := http.NewRequestWithContext(context.Background(), "POST", srv.URL+"/products/42/buy", nil)
			if err != nil {
				got <- response{err: err}
				return
			}
			resp, err := hc.Do(req)
			if err != nil {
				got <- response{err: err}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			got <- response{status: resp.StatusCode, at: time.Now()}
		}()
		select {
		case <-entered:
		case res := <-got:
			t.Fatalf("answered %d (%v) without running the handler", res.status, res.err)
		case <-time.After(5 * time.Second):
			t.Fatal("the handler did not run within 5s")
		}
		p.Blackhole(true)
		done := time.Now()
		close(finish)
		select {
		case res := <-got:
			if res.err != nil {
				t.Fatal(res.err)
			}
			took := res.at.Sub(done)
			t.Logf("response %d %v after the handler's end (ReleaseTimeout %v)", res.status, took, releaseTimeout)
			if res.status != http.StatusOK {
				t.Errorf("status %d, want 200", res.status)
			}
			if took > releaseTimeout+slack {
				t.Errorf("response %v after the handler's end, want within ReleaseTimeout %v + %v", took, releaseTimeout, slack)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no response 5s after the handler's end, want within ReleaseTimeout %v + %v", releaseTimeout, slack)
		}
	})
}
