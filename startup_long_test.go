//go:build long

package lock_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestMisconfigurationIsNotAnOutage: a wrong password and a database index
// out of range are configuration errors, which do not pass by themselves:
// Check says so at startup (ErrMisconfigured, not ErrUnavailable), a locked
// request answers 500 instead of the 503 of an outage (what it answered
// before), and the Locker's logger hears of it once. A server that is not
// there is an outage: ErrUnavailable and 503.
func TestMisconfigurationIsNotAnOutage(t *testing.T) {
	srv := redistest.OwnReal(t)
	if srv == nil {
		return
	}
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.ConfigSet(ctx, "requirepass", "right").Err(); err != nil {
		t.Fatal(err)
	}
	// Nobody listens on port 1, and no test can take it: the kernel hands
	// out ports of its ephemeral range (32768 and up) for port 0, and the
	// test servers take ports from 20000 to 32000. A port taken with
	// 127.0.0.1:0 and closed again could be any parallel test's next.
	const deadAddr = "127.0.0.1:1"

	for _, c := range []struct {
		name   string
		opt    redis.Options
		want   error
		status int
	}{
		{"wrong password", redis.Options{Addr: srv.Addr, Password: "wrong"}, lockcore.ErrMisconfigured, http.StatusInternalServerError},
		{"database out of range", redis.Options{Addr: srv.Addr, Password: "right", DB: 99}, lockcore.ErrMisconfigured, http.StatusInternalServerError},
		{"nobody there", redis.Options{Addr: deadAddr}, lockcore.ErrUnavailable, http.StatusServiceUnavailable},
		{"right", redis.Options{Addr: srv.Addr, Password: "right"}, nil, http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := c.opt
			rdb := redis.NewClient(&opt)
			t.Cleanup(func() {
				_ = rdb.Close()
				// go-redis redials a refused address from a goroutine that
				// looks once a second whether its pool was closed.
				eventually(t, 5*time.Second, "go-redis stops redialling", func() bool {
					buf := make([]byte, 1<<20)
					return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*ConnPool).tryDial")
				})
			})
			var logged syncBuffer
			locker := lock.New(rdb, lock.Logger(slog.New(slog.NewTextHandler(&logged, nil))))
			t.Cleanup(func() { _ = locker.Close() })
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			err := locker.Check(cctx)
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("Check: %v", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("Check: %v, want %v", err, c.want)
			case c.want == lockcore.ErrMisconfigured && errors.Is(err, lockcore.ErrUnavailable):
				t.Fatalf("Check: %v matches ErrUnavailable too", err)
			}
			t.Logf("Check: %v", err)

			r := chi.NewRouter()
			r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) {})
			hs := httptest.NewServer(r)
			t.Cleanup(hs.Close)
			hc := &http.Client{Timeout: 10 * time.Second}
			for i := 0; i < 2; i++ {
				code, err := post(ctx, hc, hs.URL+"/products/42/buy")
				if err != nil || code != c.status {
					t.Fatalf("request %d: %d %v, want %d", i, code, err, c.status)
				}
			}
			misconfig, down := strings.Count(logged.String(), "set up wrongly"), strings.Count(logged.String(), "Redis unreachable")
			wantMisconfig, wantDown := 0, 0
			switch c.want {
			case lockcore.ErrMisconfigured:
				wantMisconfig = 1
			case lockcore.ErrUnavailable:
				wantDown = 1 // once for the outage, however many requests
			}
			if misconfig != wantMisconfig || down != wantDown {
				t.Fatalf("logged %d misconfiguration and %d outage lines, want %d and %d: %s", misconfig, down, wantMisconfig, wantDown, logged.String())
			}
			if strings.Contains(logged.String(), "right") && c.name != "right" {
				t.Fatalf("the log repeats a password: %s", logged.String())
			}
		})
	}
}
