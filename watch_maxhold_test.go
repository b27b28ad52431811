package lock_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore/locktest"
)

// warnings is a slog.Handler that sends each record's message on a
// channel.
type warnings chan string

func (w warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w warnings) Handle(_ context.Context, r slog.Record) error {
	select {
	case w <- r.Message:
	default:
	}
	return nil
}
func (w warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w warnings) WithGroup(string) slog.Handler      { return w }

// TestLoggerThroughFromEngineMaxHold: a hold that reaches its route's
// lock.MaxHold is ended by design and goes to the next request (README:
// its own row, apart from "lease lost while the handler runs"); the
// Redis engine of lock.New logs nothing for it. lock.Logger on a Locker
// of FromEngine must not log it as "a lease was lost while its holder
// ran" either: an operator would look for an outage or a force-release
// that never happened, at every MaxHold of every request.
func TestLoggerThroughFromEngineMaxHold(t *testing.T) {
	logs := make(warnings, 16)
	locker := lock.FromEngine(new(locktest.Engine), lock.Logger(slog.New(logs)))
	t.Cleanup(func() { _ = locker.Close() })

	r := chi.NewRouter()
	r.With(locker.ByParam("productID", lock.MaxHold(50*time.Millisecond))).Post("/products/{productID}/export", func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // a long export, cut at its MaxHold
	})
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("POST", "/products/42/export", nil))

	deadline := time.After(500 * time.Millisecond)
	for {
		select {
		case msg := <-logs:
			if strings.Contains(msg, "lost") {
				t.Fatalf("a hold ended at its MaxHold was logged: %q", msg)
			}
		case <-deadline:
			return
		}
	}
}
