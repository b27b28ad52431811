package redisengine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
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

// TestRecordWritesFollowChurn: the Engine's record costs what changes,
// not what is held. 200 holds with a route and a trace id each are shown; then 10 are
// released and 10 others taken: the writes that bring the record up to
// date carry those 10 fields and 10 deletions (and the name), not the 200
// again, counted by a hook on the Engine's client. Then the record is
// deleted behind the Engine's back (as Redis loses it in a restart
// without its data): the next change finds it gone and the record is
// whole again, every field back.
func TestRecordWritesFollowChurn(t *testing.T) {
	t.Parallel()
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	c := b.Universal(t)
	var set, del atomic.Int64
	c.AddHook(recordWrites{prefix: prefix + "engine:", set: &set, del: &del})
	// Short leases, so that the record is written often; on miniredis,
	// whose scripts run in a Go interpreter, long enough that renewing 200
	// of them beside the other tests does not lose any.
	ttl := 300 * time.Millisecond
	if !b.Real() {
		ttl = 2 * time.Second
	}
	l, err := New(c, Options{Prefix: prefix, Name: "pod-a", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := t.Context()
	held := map[int]*lifecycle.Lease{}
	take := func(i int) {
		k := mustKey(t, "churn", strconv.Itoa(i))
		ls, err := l.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, Route: "/churn", Trace: "t" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		held[i] = ls
	}
	for i := range 200 {
		take(i)
	}
	admin := b.Client(t)
	key := l.recordKey(l.id)
	// shows waits until the record has the name and the route and trace
	// id of each hold (its trace id names it), no more.
	shows := func(what string) {
		t.Helper()
		eventually(t, 10*time.Second, what, func() bool {
			f, err := admin.HGetAll(ctx, key).Result()
			if err != nil || len(f) != len(held)+1 || f["name"] != "pod-a" {
				return false
			}
			seen := map[string]bool{}
			for k, v := range f {
				if k != "name" {
					seen[v] = true
				}
			}
			for i := range held {
				if !seen["/churn\nt"+strconv.Itoa(i)] {
					return false
				}
			}
			return true
		})
	}
	shows("the record of 200 holds")
	set.Store(0)
	del.Store(0)
	n := 0
	for id, ls := range held {
		if n == 10 {
			break
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		delete(held, id)
		n++
	}
	for i := 200; i < 210; i++ {
		take(i)
	}
	shows("the record after 10 released and 10 taken")
	if s, d := set.Load(), del.Load(); s < 10 || s > 20 || d != 10 {
		t.Fatalf("bringing the record of 200 holds up to date after 10 released and 10 taken wrote %d fields and deleted %d; want 10 to 20 written (the name with each write) and 10 deleted", s, d)
	}
	if err := admin.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	take(210)
	shows("the record whole again after it was deleted")
	for _, ls := range held {
		_ = ls.Release(ctx)
	}
}

// recordWrites counts the fields that HSET writes and HDEL deletes in
// the engines' records (keys under prefix), in pipelines and MULTI too.
type recordWrites struct {
	prefix   string
	set, del *atomic.Int64
}

func (h recordWrites) count(cmd redis.Cmder) {
	a := cmd.Args()
	if len(a) < 2 || !strings.HasPrefix(fmt.Sprint(a[1]), h.prefix) {
		return
	}
	switch cmd.Name() {
	case "hset":
		h.set.Add(int64(len(a)-2) / 2)
	case "hdel":
		h.del.Add(int64(len(a) - 2))
	}
}

func (h recordWrites) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h recordWrites) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h recordWrites) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}
