package lock_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestLogLinesShowNoKeyValueOrToken: with lock.Logger on and a go-redis
// client at its defaults, a route whose pattern lacks its parameter, a lease
// lost while its handler runs and a lease force-released by an operator are
// each logged, and no line carries a key's value or an owner token.
func TestLogLinesShowNoKeyValueOrToken(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		var logs syncBuffer
		rdb := b.Universal(t)
		t.Cleanup(func() { _ = rdb.Close() })
		prefix := redistest.Prefix(t)
		locker := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix}, lock.Defaults(lock.TTL(300*time.Millisecond)),
			lock.Logger(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		t.Cleanup(func() { locker.Close() })

		var mu sync.Mutex
		var tokens []string
		held := make(chan string, 2) // the key value whose handler holds its lock
		causes := make(chan error, 2)
		r := chi.NewRouter()
		r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			tokens = append(tokens, lifecycle.TokensFrom(r.Context())...)
			mu.Unlock()
			held <- chi.URLParam(r, "productID")
			select {
			case <-r.Context().Done():
				causes <- context.Cause(r.Context())
			case <-time.After(10 * time.Second):
				causes <- errors.New("never cancelled")
			}
		})
		r.With(locker.ByParam("productId")).Post("/typo/{productID}", func(http.ResponseWriter, *http.Request) {})
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)

		post := func(path string) int {
			resp, err := http.Post(srv.URL+path, "", nil)
			if err != nil {
				t.Error(err)
				return 0
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := post("/typo/secret-typo-value"); code != http.StatusInternalServerError {
			t.Errorf("misspelt parameter: %d, want 500", code)
		}

		// A lease lost: its key deleted behind the holder.
		done := make(chan int, 2)
		go func() { done <- post("/products/secret-lost-value/buy") }()
		<-held
		if err := rdb.Del(context.Background(), prefix+"{productID:secret-lost-value}").Err(); err != nil {
			t.Fatal(err)
		}
		if err := <-causes; !errors.Is(err, lockcore.ErrLockLost) {
			t.Errorf("lost lease: handler's cause %v, want ErrLockLost", err)
		}
		<-done

		// A lease force-released.
		go func() { done <- post("/products/secret-revoked-value/buy") }()
		<-held
		key, _ := lockcore.NewKey("productID", "secret-revoked-value")
		if _, err := locker.Operator().Revoke(context.Background(), key, "stuck"); err != nil {
			t.Fatal(err)
		}
		if err := <-causes; !errors.Is(err, lockcore.ErrRevoked) {
			t.Errorf("revoked lease: handler's cause %v, want ErrRevoked", err)
		}
		<-done

		out := logs.String()
		for _, want := range []string{`"route":"/typo/{productID}"`, `"resource":"productID"`, "revoked", "lost"} {
			if !strings.Contains(out, want) {
				t.Errorf("logs lack %s:\n%s", want, out)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(tokens) != 2 {
			t.Fatalf("%d tokens seen by handlers, want 2", len(tokens))
		}
		for _, s := range append([]string{"secret-typo-value", "secret-lost-value", "secret-revoked-value"}, tokens...) {
			if strings.Contains(out, s) {
				t.Errorf("%q shows up in the logs:\n%s", s, out)
			}
		}
	})
}
