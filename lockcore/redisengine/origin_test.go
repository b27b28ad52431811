package redisengine

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
)

// TestLogNamesInstanceRouteTrace: the engine's log lines carry its
// instance name, and a lost hold's line the route and trace id it was
// taken with.
func TestLogNamesInstanceRouteTrace(t *testing.T) {
	b := redistest.Mini(t)
	prefix := redistest.Prefix(t)
	var logged logBuffer
	l := newLocker(t, b, prefix, Options{Name: "pod-a", TTL: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	ops := newLocker(t, b, prefix, Options{})
	key := mustKey(t, "productID", "42")
	ls, err := l.Acquire(t.Context(), key, lifecycle.Policy{Route: "/products/{productID}/buy", Trace: "4bf92f3577b34da6a3ce929d0e0e4736"})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(context.Background())
	if _, err := ops.Revoke(t.Context(), key, "stuck"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ls.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked hold's context was not cancelled")
	}
	// The line follows the cancellation: the engine logs once lockcore
	// has ended the lease.
	line := ""
	eventually(t, 5*time.Second, "the loss logged", func() bool {
		for _, s := range strings.Split(logged.String(), "\n") {
			if strings.Contains(s, "a lease was lost") {
				line = s
			}
		}
		return line != ""
	})
	for _, want := range []string{"instance=pod-a", "route=/products/{productID}/buy", "trace=4bf92f3577b34da6a3ce929d0e0e4736", "resource=productID"} {
		if !strings.Contains(line, want) {
			t.Errorf("the loss's log line lacks %s:\n%s", want, logged.String())
		}
	}
}

// TestNameChecked: a Name that operators could not read is refused, and
// the default names the host and process.
func TestNameChecked(t *testing.T) {
	for _, name := range []string{"pod\n-a", strings.Repeat("x", maxName+1), "\xff"} {
		if _, err := (Options{Name: name}).withDefaults(false); err == nil {
			t.Errorf("Name %q accepted", name)
		}
	}
	o, err := (Options{}).withDefaults(false)
	if err != nil || o.Name == "" || !strings.HasSuffix(o.Name, "-"+strconv.Itoa(os.Getpid())) {
		t.Errorf("default Name %q, %v", o.Name, err)
	}
}
