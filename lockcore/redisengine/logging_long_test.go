//go:build long

package redisengine

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestOutageLoggedBeforeLeaseLost: the only traffic is a held lease when
// Redis goes away. The engine logs the outage, as a warning, from the first
// call that fails (its subscription, a renewal), before the lease is
// declared lost, not when the release of the lost lease fails afterwards;
// once, though the release and many acquisitions fail together after it;
// and once, as info, that Redis answers again when it is back.
func TestOutageLoggedBeforeLeaseLost(t *testing.T) {
	t.Parallel() // it waits on a lease; its keys are its own
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		// Last, once the client is closed: go-redis redials an address
		// that refused its dials from a goroutine that looks once a second
		// whether its pool was closed.
		t.Cleanup(func() {
			eventuallyOK(5*time.Second, func() bool {
				buf := make([]byte, 1<<20)
				return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*ConnPool).tryDial")
			})
		})
		logged := new(logRecords)
		l, p := cutOffLocker(t, b, defaultKind, redistest.Prefix(t), Options{TTL: 600 * time.Millisecond, Logger: slog.New(logged)})
		warmScripts(t, l)
		ctx := context.Background()
		ls, err := l.Acquire(ctx, mustKey(t, "productID", "7"), lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Down(true); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ls.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the lease was not declared lost with Redis down")
		}
		down, level := logged.first(logDown)
		if down < 0 {
			t.Fatalf("the lease was declared lost (%v) before %q was logged:\n%s", context.Cause(ls.Context()), logDown, logged)
		}
		if level != slog.LevelWarn {
			t.Errorf("%q logged at %v, want WARN", logDown, level)
		}
		if lost, _ := logged.first("a lease was lost"); lost >= 0 && lost < down {
			t.Errorf("the loss was logged before the outage:\n%s", logged)
		}

		// The release of the lost lease and many acquisitions fail at once.
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = ls.Release(ctx)
		}()
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if ls, err := l.Acquire(ctx, mustKey(t, "productID", fmt.Sprint(100+i)), lifecycle.Policy{Wait: lockcore.FailFast}); err == nil {
					_ = ls.Release(ctx)
					t.Errorf("acquisition %d succeeded with Redis down", i)
				}
			}()
		}
		wg.Wait()
		if n := logged.count(logDown); n != 1 {
			t.Fatalf("%q logged %d times, want 1:\n%s", logDown, n, logged)
		}
		if n := logged.count(logUp); n != 0 {
			t.Fatalf("%q logged with Redis down:\n%s", logUp, logged)
		}

		if err := p.Down(false); err != nil {
			t.Fatal(err)
		}
		// go-redis refuses to dial for up to a second after the dials that
		// failed: the acquisitions fail until then, as one outage.
		eventually(t, 5*time.Second, "an acquisition with Redis back", func() bool {
			again, err := l.Acquire(ctx, mustKey(t, "productID", "7"), lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				return false
			}
			_ = again.Release(ctx)
			return true
		})
		if up, level := logged.first(logUp); up < 0 || level != slog.LevelInfo {
			t.Errorf("%q not logged at INFO once Redis answered:\n%s", logUp, logged)
		}
		for what, want := range map[string]int{logDown: 1, logUp: 1} {
			if n := logged.count(what); n != want {
				t.Errorf("%q logged %d times, want %d:\n%s", what, n, want, logged)
			}
		}
	})
}

// TestPartitionLoggedBeforeLeaseLost: Redis stops answering without
// closing a connection (a partition), while the only traffic is a held
// lease. The renewal that goes unanswered for Options.Timeout is logged
// as the outage, once, well before the lease runs out, and before the
// subscription's health check could notice.
func TestPartitionLoggedBeforeLeaseLost(t *testing.T) {
	t.Parallel() // it waits on a lease; its keys are its own
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		logged := new(logRecords)
		l, p := cutOffLocker(t, b, defaultKind, redistest.Prefix(t), Options{TTL: 3 * time.Second, Timeout: 500 * time.Millisecond, Logger: slog.New(logged)})
		warmScripts(t, l)
		ctx := context.Background()
		ls, err := l.Acquire(ctx, mustKey(t, "productID", "8"), lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		p.Blackhole(true)
		select {
		case <-ls.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the lease was not declared lost with Redis silent")
		}
		down, level := logged.first(logDown)
		if down < 0 || level != slog.LevelWarn {
			t.Fatalf("the lease was declared lost (%v) before %q was logged as a warning:\n%s", context.Cause(ls.Context()), logDown, logged)
		}
		if lost, _ := logged.first("a lease was lost"); lost >= 0 && lost < down {
			t.Errorf("the loss was logged before the outage:\n%s", logged)
		}
		if n := logged.count(logDown); n != 1 {
			t.Errorf("%q logged %d times, want 1:\n%s", logDown, n, logged)
		}
	})
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
			if _, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}); err == nil {
				t.Fatal("acquired with Redis refusing connections")
			}
		}
		p.Heal()
		ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
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
