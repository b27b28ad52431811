package lock_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestLoggerThroughFromEngine: lock.Logger given to FromEngine logs a
// lease lost while its handler ran and one force-released, once each, for
// an engine made without a logger of its own; and NewRedis, whose engine
// logs these itself, logs each once too, not twice.
func TestLoggerThroughFromEngine(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, how := range []string{"FromEngine", "NewRedis"} {
			t.Run(how, func(t *testing.T) {
				var logs syncBuffer
				lg := slog.New(slog.NewJSONHandler(&logs, nil))
				rdb := b.Client(t)
				prefix := redistest.Prefix(t)
				o := redisengine.Options{Prefix: prefix, TTL: 300 * time.Millisecond}
				var locker *lock.Locker
				if how == "FromEngine" {
					e, err := redisengine.New(rdb, o)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { e.Close() })
					locker = lock.FromEngine(e, lock.Logger(lg))
				} else {
					locker = lock.NewRedis(rdb, o, lock.Logger(lg))
					t.Cleanup(func() { locker.Close() })
				}

				held := make(chan struct{}, 1)
				causes := make(chan error, 1)
				r := chi.NewRouter()
				r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
					held <- struct{}{}
					select {
					case <-r.Context().Done():
						causes <- context.Cause(r.Context())
					case <-time.After(10 * time.Second):
						causes <- errors.New("never cancelled")
					}
				})
				srv := httptest.NewServer(r)
				t.Cleanup(srv.Close)
				run := func(id string, take func()) error {
					done := make(chan error, 1)
					go func() {
						resp, err := http.Post(srv.URL+"/products/"+id+"/buy", "", nil)
						if err == nil {
							resp.Body.Close()
						}
						done <- err
					}()
					<-held
					take()
					cause := <-causes
					if err := <-done; err != nil {
						t.Error(err)
					}
					return cause
				}

				// Lost: the key deleted behind the holder.
				cause := run("7", func() {
					if err := rdb.Del(context.Background(), prefix+"{productID:7}").Err(); err != nil {
						t.Fatal(err)
					}
				})
				if !errors.Is(cause, lockcore.ErrLockLost) {
					t.Fatalf("lost lease: handler's cause %v, want ErrLockLost", cause)
				}
				// Force-released by an operator.
				cause = run("8", func() {
					key, _ := lockcore.NewKey("productID", "8")
					if _, err := locker.Operator().Revoke(context.Background(), key, "stuck"); err != nil {
						t.Fatal(err)
					}
				})
				if !errors.Is(cause, lockcore.ErrRevoked) {
					t.Fatalf("revoked lease: handler's cause %v, want ErrRevoked", cause)
				}

				// The handlers have seen their causes: the lines were
				// written before (the engine's), or right as the contexts
				// ended (the Locker's, from context.AfterFunc).
				deadline := time.Now().Add(5 * time.Second)
				for strings.Count(logs.String(), "a lease was lost") < 2 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				out := logs.String()
				if n := strings.Count(out, "a lease was lost"); n != 2 {
					t.Errorf("%d lines of a lost lease, want 2 (one per lease):\n%s", n, out)
				}
				if !strings.Contains(out, "revoked") || !strings.Contains(out, `"resource":"productID"`) {
					t.Errorf("the lines do not say revoked and name the resource:\n%s", out)
				}
			})
		}
	})
}

// TestLoggerOutageThroughFromEngine: lock.Logger given to FromEngine logs an
// engine that stops answering once, however many requests it refuses, and
// once when it answers again.
func TestLoggerOutageThroughFromEngine(t *testing.T) {
	m := redistest.Mini(t)
	var logs syncBuffer
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	e, err := redisengine.New(rdb, redisengine.Options{Prefix: redistest.Prefix(t), Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	locker := lock.FromEngine(e, lock.Logger(slog.New(slog.NewJSONHandler(&logs, nil))), lock.Defaults(lock.FailFast()))
	r := chi.NewRouter()
	r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) {})
	post := func() int {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/products/7/buy", nil))
		return rec.Code
	}
	if code := post(); code != http.StatusOK {
		t.Fatalf("before the outage: %d", code)
	}
	m.Mini.Close()
	for i := range 5 {
		if code := post(); code != http.StatusServiceUnavailable {
			t.Fatalf("request %d in the outage: %d, want 503", i, code)
		}
	}
	if err := m.Mini.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for post() != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("no 200 within 5 s of the restart")
		}
	}
	out := logs.String()
	if n := strings.Count(out, "the lock engine is unavailable"); n != 1 {
		t.Errorf("%d lines of the outage for 5 refused requests, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "answers again"); n != 1 {
		t.Errorf("%d lines of the engine answering again, want 1:\n%s", n, out)
	}
}
