package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestRedis runs the command against Redis: a real redis-server when one
// is on PATH (ROUTELOCK_REQUIRE_REDIS=1 makes one required), and
// miniredis. A holder in one engine holds productID:42 with a short lease
// and a waiter in another engine queues for it; ls and inspect show them,
// release revokes the hold.
func TestRedis(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		name, value := b.Env()
		env := map[string]string{name: value}
		cli := func(args ...string) result {
			t.Helper()
			return runWith(t, env, append([]string{"-prefix", prefix}, args...)...)
		}
		newEngine := func() *redisengine.Engine {
			e, err := redisengine.New(b.Universal(t), redisengine.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return e
		}
		holder, waiter := newEngine(), newEngine()
		key, err := lockcore.NewKey("productID", "42")
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		lease, err := lifecycle.Serve(holder, nil).Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 600 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
		type acquired struct {
			lease *lifecycle.Lease
			err   error
		}
		got := make(chan acquired, 1)
		go func() {
			l, err := lifecycle.Serve(waiter, nil).Acquire(ctx, key, lifecycle.Policy{Wait: 20 * time.Second, TTL: 2 * time.Second})
			got <- acquired{l, err}
		}()

		// The waiter is queued in Redis when inspect sees it.
		var in operate.Lock
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(10 * time.Second); ; {
			r := cli("inspect", "-json", "productID:42")
			if r.code != 0 {
				t.Fatalf("inspect -json: %d %q", r.code, r.stderr)
			}
			in = operate.Lock{}
			if err := json.Unmarshal([]byte(r.stdout), &in); err != nil {
				t.Fatal(err)
			}
			if len(in.Waiters) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the waiter never showed: %s", r.stdout)
			}
			<-tick.C
		}
		if !in.Held || len(in.Holders) != 1 || in.Fence != lease.Fence() {
			t.Fatalf("inspect: %+v, want held with fence %d", in, lease.Fence())
		}
		owner := in.Holders[0].Owner

		r := cli("ls")
		lines := strings.Split(r.stdout, "\n")
		if r.code != 0 || len(lines) < 2 || !strings.HasPrefix(lines[0], "KEY ") || !strings.HasPrefix(lines[1], "productID:42 ") ||
			!strings.Contains(lines[1], owner) || !strings.HasSuffix(lines[1], " 1") {
			t.Errorf("ls: %d %q\n%s", r.code, r.stderr, r.stdout)
		}
		r = cli("inspect", "productID:42")
		for _, want := range []string{"state:       held\n", "holder:      " + owner + ", 1 acquisition, on ", "waiters:     1\n", "  1  "} {
			if r.code != 0 || !strings.Contains(r.stdout, want) {
				t.Errorf("inspect lacks %q: %d %q\n%s", want, r.code, r.stderr, r.stdout)
			}
		}
		for _, r := range []result{cli("ls"), cli("ls", "-json"), cli("inspect", "productID:42"), cli("inspect", "-json", "productID:42")} {
			if strings.Contains(r.stdout, lease.Token()) {
				t.Fatalf("output shows the owner token:\n%s", r.stdout)
			}
		}

		if r := cli("release", "productID:42"); r.code != 2 {
			t.Errorf("release without -reason: %d %q", r.code, r.stderr)
		}
		if r := cli("release", "productID:43", "--reason", "nothing there"); r.code != 3 || !strings.Contains(r.stderr, "productID:43 is not held") {
			t.Errorf("release of a free key: %d %q", r.code, r.stderr)
		}
		r = cli("release", "productID:42", "--reason", "cli test: holder stuck")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "released productID:42: it was held by owner "+owner) {
			t.Fatalf("release: %d %q %q", r.code, r.stdout, r.stderr)
		}

		select {
		case <-lease.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the holder's context was not cancelled")
		}
		if cause := context.Cause(lease.Context()); !errors.Is(cause, lockcore.ErrRevoked) {
			t.Errorf("holder's cause %v, want ErrRevoked", cause)
		}
		var a acquired
		select {
		case a = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not get the lock")
		}
		if a.err != nil {
			t.Fatal(a.err)
		}
		defer a.lease.Release(context.Background())
		if a.lease.Fence() <= lease.Fence() {
			t.Errorf("waiter's fence %d, not above the revoked %d", a.lease.Fence(), lease.Fence())
		}

		r = cli("inspect", "-json", "productID:42")
		in = operate.Lock{}
		if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || len(in.Audit) == 0 {
			t.Fatalf("inspect after: %d %s", r.code, r.stdout)
		}
		if au := in.Audit[0]; au.Reason != "cli test: holder stuck" || au.Owner != owner || au.Fence != lease.Fence() || in.Fence != a.lease.Fence() {
			t.Errorf("after the release: %+v", in)
		}
	})
}

// TestBadURL: a Redis URL's password never shows in what the command
// prints, whether the URL does not parse or the Redis it names does not
// answer.
func TestBadURL(t *testing.T) {
	const pw = "hunter2pw"
	urls := []string{
		"redis://user:" + pw + "@localhost:notaport/0",
		"redis://:" + pw + "@localhost:6379/notadb",
		"redis://:" + pw + "@localhost:6379/0/1",
		"http://:" + pw + "@localhost:6379/0",
		"redis://:" + pw + "@localhost:6379/0?dial_timeout=" + pw,
		"redis://:" + pw + "@127.0.0.1:1/0", // nothing listens there
		"redis://user:" + pw + "@[::1:6379/0",
		"unix://:" + pw + "@",
	}
	// Servers that want another password.
	mini := redistest.Mini(t)
	mini.Mini.RequireAuth("right-password")
	urls = append(urls, "redis://:"+pw+"@"+mini.Addr+"/0", "redis://default:"+pw+"@"+mini.Addr+"/0")
	if srv := redistest.OwnReal(t); srv != nil {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		err := c.ConfigSet(t.Context(), "requirepass", "right-password").Err()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, "redis://:"+pw+"@"+srv.Addr+"/0", "redis://default:"+pw+"@"+srv.Addr+"/0")
	}
	for _, u := range urls {
		r := runWith(t, map[string]string{"REDIS_URL": u}, "-timeout", "3s", "ls")
		t.Logf("%s: %s", u, r.stderr)
		if r.code != 1 || strings.Contains(r.stderr, pw) || strings.Contains(r.stdout, pw) || r.stderr == "" {
			t.Errorf("REDIS_URL %s: exit %d, stderr %q", u, r.code, r.stderr)
		}
	}
}
