//go:build long

package lock_test

// The bounds of every call with Redis down, under each client configuration:
// a fault run, selected with go test -tags long, which CI runs.

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestBoundsWithRedisDown checks the promise that the engine keeps its
// bounds when Redis is down and the kernel refuses connections (a stopped
// or restarting Redis), with go-redis at its defaults and with
// ContextTimeoutEnabled, which go-redis answers by redialling and retrying
// for about 1.7 s per command: a fail-fast Acquire returns ErrUnavailable
// within Options.Timeout, an Acquire with a 300 ms deadline within it, a
// Release within ReleaseTimeout, Check within Options.Timeout, and each of
// 20 HTTP requests to a route behind ByParam is answered 503 within
// Options.Timeout, on the README's Locker (lock.New's defaults); each with
// downSlack more. Every case has a client of its own whose pool has not
// yet given up dialling, as on the first requests of an outage. The
// 503s' latencies are logged for the README.
func TestBoundsWithRedisDown(t *testing.T) {
	b := redistest.Best(t) // behind a proxy that is down, any Redis will do
	const timeout, releaseTimeout = 500 * time.Millisecond, 500 * time.Millisecond
	for _, cl := range downClients {
		t.Run(cl.name, func(t *testing.T) {
			// locker returns a Locker on a Redis engine with the options of
			// o, if given, and the test's prefix, whose client reaches b
			// through a proxy, and the proxy.
			locker := func(t *testing.T, o ...redisengine.Options) (*lock.Locker, *faultproxy.Proxy) {
				p := faultproxy.Start(t, b.Addr)
				rdb := redis.NewClient(cl.opt(p.Addr))
				var opt redisengine.Options
				if len(o) > 0 {
					opt = o[0]
				}
				opt.Prefix = redistest.Prefix(t)
				l := lock.NewRedis(rdb, opt)
				t.Cleanup(func() {
					_ = l.Close()
					_ = rdb.Close()
				})
				t.Cleanup(p.Close)
				return l, p
			}
			engineOpts := redisengine.Options{Timeout: timeout, ReleaseTimeout: releaseTimeout}
			unavailable := func(t *testing.T, what string, err error) {
				t.Helper()
				if !errors.Is(err, lockcore.ErrUnavailable) || errors.Is(err, lockcore.ErrNotAcquired) {
					t.Errorf("%s with Redis down: %v; want ErrUnavailable, not ErrNotAcquired", what, err)
				}
			}
			key, err := lockcore.NewKey("productID", "42")
			if err != nil {
				t.Fatal(err)
			}

			t.Run("acquire-fail-fast", func(t *testing.T) {
				l, p := locker(t, engineOpts)
				down(t, p)
				_, err := within(t, "Acquire", timeout+downSlack, func() error {
					_, err := l.Acquire(context.Background(), key, lifecycle.Policy{Wait: lockcore.FailFast})
					return err
				})
				unavailable(t, "fail-fast Acquire", err)
				if errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("fail-fast Acquire without a deadline, Redis down: %v; want no context.DeadlineExceeded (gRPC would answer DeadlineExceeded)", err)
				}
			})
			t.Run("acquire-deadline", func(t *testing.T) {
				l, p := locker(t, engineOpts)
				down(t, p)
				const deadline = 300 * time.Millisecond
				_, err := within(t, "Acquire", deadline+downSlack, func() error {
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					_, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: 5 * time.Second})
					return err
				})
				unavailable(t, "Acquire with a deadline", err)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Acquire with a deadline, Redis down: %v; want it to match context.DeadlineExceeded", err)
				}
			})
			t.Run("release", func(t *testing.T) {
				l, p := locker(t, engineOpts)
				ctx := context.Background()
				ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil {
					t.Fatal(err)
				}
				down(t, p)
				_, err = within(t, "Release", releaseTimeout+downSlack, func() error { return ls.Release(ctx) })
				unavailable(t, "Release", err)
			})
			t.Run("check", func(t *testing.T) {
				l, p := locker(t, engineOpts)
				down(t, p)
				_, err := within(t, "Check", timeout+downSlack, func() error { return l.Check(context.Background()) })
				unavailable(t, "Check", err)
			})
			t.Run("http", func(t *testing.T) {
				l, p := locker(t) // the README's: lock.New's defaults
				// redisengine.Options.Timeout's default (1s), which lock.New keeps.
				bound := time.Second + downSlack
				r := chi.NewRouter()
				r.With(l.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
					t.Error("the handler ran with Redis down")
				})
				srv := httptest.NewServer(r)
				t.Cleanup(srv.Close)
				hc := httpClient(t, nil)
				down(t, p)
				const n = 20
				took := make([]time.Duration, 0, n)
				for range n {
					var status int
					d, err := within(t, "", bound, func() error {
						resp, err := hc.Post(srv.URL+"/products/42/buy", "text/plain", nil)
						if err != nil {
							return err
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						status = resp.StatusCode
						return resp.Body.Close()
					})
					if err != nil {
						t.Fatal(err)
					}
					took = append(took, d)
					if status != http.StatusServiceUnavailable {
						t.Errorf("status %d with Redis down, want 503", status)
					}
				}
				inOrder := make([]string, n)
				for i, d := range took {
					inOrder[i] = d.Round(time.Millisecond).String()
				}
				slices.Sort(took)
				t.Logf("%d requests answered 503 with Redis down, %s client: min %v, median %v, max %v (bound %v); in order: %s",
					n, cl.name, took[0].Round(time.Millisecond), ((took[n/2-1] + took[n/2]) / 2).Round(time.Millisecond),
					took[n-1].Round(time.Millisecond), bound, strings.Join(inOrder, " "))
			})
		})
	}
}

// downSlack is what the bounds below allow on top of the engine's own
// Timeout, ReleaseTimeout or the caller's deadline, for waking the caller
// and writing the response. Measured on a 2-core VM shared with other
// work: at most 11 ms over the bound in five runs, with either client.
const downSlack = 100 * time.Millisecond

// downClients are the go-redis configurations the README's promises are
// tested with when Redis is down: its defaults (MaxRetries 3, 5 dial
// attempts 100 ms apart per connection, context deadlines ignored) and the
// README's quick start, which applies context deadlines.
var downClients = []struct {
	name string
	opt  func(addr string) *redis.Options
}{
	{"defaults", func(addr string) *redis.Options { return &redis.Options{Addr: addr} }},
	{"ctxdeadline", func(addr string) *redis.Options { return &redis.Options{Addr: addr, ContextTimeoutEnabled: true} }},
}

// down takes p down: Redis refuses connections.
func down(t *testing.T, p *faultproxy.Proxy) {
	t.Helper()
	if err := p.Down(true); err != nil {
		t.Fatal(err)
	}
}

// within runs f and fails the test unless it returns within bound; it
// waits 10 s at most. It logs how long f took, unless what is empty, and
// returns that and f's error.
func within(t *testing.T, what string, bound time.Duration, f func() error) (time.Duration, error) {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- f() }()
	select {
	case err := <-done:
		d := time.Since(start)
		if what != "" {
			t.Logf("%s returned after %v: %v", what, d.Round(time.Millisecond), err)
		}
		if d > bound {
			t.Errorf("%s returned after %v, want within %v", cmp.Or(what, "a request"), d, bound)
		}
		return d, err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s had not returned after 10s, want within %v", cmp.Or(what, "a request"), bound)
		return 0, nil
	}
}
