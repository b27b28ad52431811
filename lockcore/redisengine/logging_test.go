package redisengine

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// logBuffer is a goroutine-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogsTransitionsAndLosses: with a Logger, an engine says once that
// Redis stopped answering however many requests fail, once that it answers
// again, and once that a lease was lost and why, naming the resource and
// never a key's value or a token.
func TestLogsTransitionsAndLosses(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		var logged logBuffer
		prefix := redistest.Prefix(t)
		l, p := cutOffLocker(t, b, defaultKind, prefix, Options{TTL: 300 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		warmScripts(t, l)
		ctx := context.Background()
		key := mustKey(t, "productID", "4242")

		p.Refuse(true)
		p.ResetAll()
		for i := 0; i < 5; i++ {
			if _, err := l.Acquire(ctx, key, lockcore.Policy{Wait: lockcore.FailFast}); err == nil {
				t.Fatal("acquired with Redis refusing connections")
			}
		}
		p.Heal()
		ls, err := l.Acquire(ctx, key, lockcore.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		// Another owner deletes the key: the next renewal finds it gone.
		if err := b.Client(t).Del(ctx, l.redisKeys(key)[0]).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ls.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the lease was not lost")
		}
		_ = ls.Release(ctx)
		// The loss is logged by the goroutine that cancelled the context,
		// right after it did.
		eventually(t, 2*time.Second, "the loss logged", func() bool { return strings.Contains(logged.String(), "a lease was lost") })

		out := logged.String()
		t.Logf("lease ended with %v\n%s", context.Cause(ls.Context()), out)
		for what, want := range map[string]int{
			"Redis unreachable":   1,
			"Redis answers again": 1,
			"a lease was lost":    1,
			"resource=productID":  1,
		} {
			if n := strings.Count(out, what); n != want {
				t.Errorf("%q logged %d times, want %d", what, n, want)
			}
		}
		if strings.Contains(out, "4242") || strings.Contains(out, ls.Token()) {
			t.Errorf("the log repeats a key value or a token:\n%s", out)
		}
	})
}
