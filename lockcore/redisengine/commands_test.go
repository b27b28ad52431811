package redisengine

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// uncontendedCycle is what Redis runs for one uncontended cycle, per
// command: the table of "What Redis runs for one lock" in docs/design.md.
var uncontendedCycle = map[string]int{"evalsha": 2, "mget": 1, "get": 1, "time": 1, "set": 2, "del": 1}

// TestCommandsPerCycle: what Redis runs for one uncontended cycle, a free
// lock taken and released, counted by the server's INFO commandstats over
// 500 cycles on a redis-server of the test's own (the engine's calls
// only; scripts' commands included): exactly the commands that "What
// Redis runs for one lock" in docs/design.md lists and justifies, for a
// route at the defaults (which waits) and one that fails fast, and at the
// defaults on a key that a waiter had before (its fence, marked as saying
// that waiters may be queued, costs one EXISTS, which clears it). Without
// redis-server on PATH it says so and counts nothing: miniredis keeps no
// commandstats.
func TestCommandsPerCycle(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Logf("no redis-server of the test's own (%v): commands not counted", err)
		return
	}
	t.Cleanup(srv.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := redistest.Prefix(t)
	l, waiter := lockerOn(t, rdb, prefix, Options{}), lockerOn(t, rdb, prefix, Options{})
	for _, c := range []struct {
		name    string
		p       lifecycle.Policy
		waiters bool // another waited for the key before the count
		want    map[string]int
	}{
		{"defaults", lifecycle.Policy{}, false, uncontendedCycle},
		{"fail fast", lifecycle.Policy{Wait: lockcore.FailFast}, false, uncontendedCycle},
		// The first cycle looks for the queue that its fence says may be
		// there, finds none and clears the mark: one EXISTS in 500.
		{"defaults after waiters", lifecycle.Policy{}, true, uncontendedCycle},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			k := mustKey(t, "commands", c.name)
			if c.waiters {
				contend(t, l, waiter, k)
			} else {
				cycles(t, l, k, c.p, 1) // loads the scripts
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			const n = 500
			cycles(t, l, k, c.p, n)
			got, shown := perCycle(commandCalls(t, rdb), n)
			t.Logf("per cycle: %s", shown)
			if !maps.Equal(got, c.want) {
				t.Errorf("commands per cycle %v, want %v", got, c.want)
			}
		})
	}
}

// cycles takes the free lock on k with p and releases it, n times.
func cycles(t *testing.T, l *Engine, k lockcore.Key, p lifecycle.Policy, n int) {
	t.Helper()
	ctx := context.Background()
	for range n {
		ls, err := lifecycle.Serve(l, nil).Acquire(ctx, k, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// contend has waiter queue for k while l holds it, then take it and
// release it: the lock's last fence is left marked (waiters may be
// queued), though none is.
func contend(t *testing.T, l, waiter *Engine, k lockcore.Key) {
	t.Helper()
	ctx := context.Background()
	ls, err := lifecycle.Serve(l, nil).Acquire(ctx, k, lifecycle.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ws, err := lifecycle.Serve(waiter, nil).Acquire(ctx, k, lifecycle.Policy{Wait: 5 * time.Second})
		if err == nil {
			err = ws.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "the waiter queued", func() bool { return len(inspect(t, l, k).Waiters) == 1 })
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if v := l.rdb.Get(ctx, l.redisKeys(k)[2]).Val(); !strings.HasSuffix(v, " q") {
		t.Fatalf("fence %q after a waiter had the lock, want it marked", v)
	}
}

// perCycle returns calls over n cycles as whole calls per cycle, each
// command's rounded (the engine's own background calls, its settings and
// its subscription's health, come once in many cycles, and round to
// none), and the exact figures for a log line.
func perCycle(calls map[string]int64, n int) (map[string]int, string) {
	got := map[string]int{}
	var shown []string
	for _, cmd := range slices.Sorted(maps.Keys(calls)) {
		per := float64(calls[cmd]) / float64(n)
		shown = append(shown, fmt.Sprintf("%s %.2f", cmd, per))
		if r := int(math.Round(per)); r > 0 {
			got[cmd] = r
		}
	}
	return got, strings.Join(shown, ", ")
}

// commandCalls returns the calls of each command since the last CONFIG
// RESETSTAT, from INFO commandstats, less the INFO and CONFIG calls of
// the count itself.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			calls[name] = n
		}
	}
	return calls
}
