package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/quorumengine"
)

// TestQuorum runs the command on three independent masters, as
// REDIS_QUORUM_URLS names them: ls and inspect show a lock a quorum
// engine holds, and release ends it, the holder's context with
// ErrRevoked.
func TestQuorum(t *testing.T) {
	var urls []string
	var cs []redis.UniversalClient
	for range 3 {
		// Three independent masters: real servers of the test's own where
		// redis-server is on PATH, else three miniredis.
		addr := redistest.Mini(t).Addr
		if s := redistest.OwnReal(t); s != nil {
			addr = s.Addr
		}
		urls = append(urls, "redis://"+addr)
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	prefix := redistest.Prefix(t)
	e, err := quorumengine.New(cs, quorumengine.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	key, _ := lockcore.NewKey("productID", "7")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := lifecycle.Serve(e, nil).Acquire(ctx, key, lifecycle.Policy{Wait: 10 * time.Second, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())

	env := map[string]string{QuorumVar: strings.Join(urls, ",")}
	cmd := func(args ...string) result {
		t.Helper()
		return runWith(t, env, append([]string{"-prefix", prefix}, args...)...)
	}
	if r := cmd("ls"); r.code != 0 || !strings.Contains(r.stdout, "productID:7") {
		t.Fatalf("ls: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := cmd("inspect", "productID:7"); r.code != 0 || !strings.Contains(r.stdout, "productID:7") {
		t.Fatalf("inspect: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := cmd("release", "productID:7", "-reason", "stuck"); r.code != 0 {
		t.Fatalf("release: %d %q %q", r.code, r.stdout, r.stderr)
	}
	select {
	case <-lease.Context().Done():
		if cause := context.Cause(lease.Context()); !errors.Is(cause, lockcore.ErrRevoked) {
			t.Errorf("the holder's cause: %v, want ErrRevoked", cause)
		}
	case <-ctx.Done():
		t.Fatal("the holder was not told of the release")
	}
	if r := cmd("release", "productID:7", "-reason", "again"); r.code != exitNotHeld {
		t.Errorf("a second release: %d %q, want %d", r.code, r.stderr, exitNotHeld)
	}

	// The variable beside another Redis variable, or a URL that is none:
	// an error that names the variable, never its value.
	both := runWith(t, map[string]string{QuorumVar: "redis://secret@127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1"}, "ls")
	bad := runWith(t, map[string]string{QuorumVar: "redis://127.0.0.1:1,http://secret@x"}, "ls")
	for _, r := range []result{both, bad} {
		if r.code == 0 || !strings.Contains(r.stderr, QuorumVar) || strings.Contains(r.stderr, "secret") {
			t.Errorf("misconfigured: %d %q", r.code, r.stderr)
		}
	}
}
