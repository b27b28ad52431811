package cli

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

const guardLine = "Redis restarted without its data: no lock is taken for "

// guardShown runs ls, ls -json, inspect and inspect -json with env and
// returns whether the human output has the restart guard's line and the
// restart_guard_ms of the JSON (0 when left out).
func guardShown(t *testing.T, env map[string]string, prefix string) (line bool, list, lock float64) {
	t.Helper()
	for _, args := range [][]string{{"ls"}, {"inspect", "productID:42"}} {
		r := runWith(t, env, append([]string{"-prefix", prefix}, args...)...)
		if r.code != 0 {
			t.Fatalf("%v: %d %q", args, r.code, r.stderr)
		}
		has := strings.HasPrefix(r.stdout, guardLine) && strings.Contains(strings.SplitN(r.stdout, "\n", 2)[0], " more (restart guard)")
		if args[0] == "ls" {
			line = has
		} else if has != line {
			t.Fatalf("ls and inspect disagree on the guard:\n%s", r.stdout)
		}
		r = runWith(t, env, append([]string{"-prefix", prefix, "-json"}, args...)...)
		var v map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
			t.Fatalf("%v -json: %d %q\n%s", args, r.code, r.stderr, r.stdout)
		}
		ms, _ := v["restart_guard_ms"].(float64)
		if _, ok := v["restart_guard_ms"]; ok && ms <= 0 {
			t.Fatalf("%v -json: restart_guard_ms %v, want it left out or positive", args, v["restart_guard_ms"])
		}
		if args[0] == "ls" {
			list = ms
		} else {
			lock = ms
		}
	}
	return line, list, lock
}

// TestRestartGuardShown: on a redis-server started without persistence,
// whose application engines share a MaxTTL of 1 s, ls and inspect print
// the restart guard's line before their output and -json has
// restart_guard_ms while the guard lasts, and neither once it is over.
// The command, run before any application engine, decides no guard (its
// own engine would have the default MaxTTL, 30 s): the application's
// first acquisition is refused for at most 1 s, and the command run while
// the guard lasts does not lengthen it. On a server with an append-only
// file and on miniredis nothing is shown.
func TestRestartGuardShown(t *testing.T) {
	const maxTTL = time.Second
	key, err := lockcore.NewKey("productID", "42")
	if err != nil {
		t.Fatal(err)
	}
	engine := func(t *testing.T, addr, prefix string) *redisengine.Engine {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { rdb.Close() })
		e, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix, TTL: maxTTL / 2, MaxTTL: maxTTL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}

	t.Run("no persistence", func(t *testing.T) {
		s := redistest.OwnVolatile(t)
		if s == nil {
			return
		}
		prefix := redistest.Prefix(t)
		env := map[string]string{"REDIS_URL": "redis://" + s.Addr + "/0"}
		if line, list, lock := guardShown(t, env, prefix); line || list != 0 || lock != 0 {
			t.Fatalf("before any engine decided the guard: line %v, restart_guard_ms %v, %v; want none", line, list, lock)
		}
		e := engine(t, s.Addr, prefix)
		ctx := t.Context()
		_, err := lifecycle.Serve(e, nil).Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		var ge *lockcore.RestartGuardError
		if !errors.As(err, &ge) || ge.RetryAfter > maxTTL {
			t.Fatalf("first acquisition on a fresh server, after the command: %v, want the restart guard's refusal for at most %v", err, maxTTL)
		}
		line, list, lock := guardShown(t, env, prefix)
		if !line || list <= 0 || list > float64(maxTTL.Milliseconds()) || lock <= 0 || lock > float64(maxTTL.Milliseconds()) {
			t.Fatalf("while the guard lasts (%v left at the refusal): line %v, restart_guard_ms %v in ls, %v in inspect; want the line and 0 < ms <= %d",
				ge.RetryAfter, line, list, lock, maxTTL.Milliseconds())
		}
		t.Logf("while the guard lasts: restart_guard_ms %v in ls, %v in inspect (%v left at the refusal)", list, lock, ge.RetryAfter)

		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(maxTTL + 2*time.Second); ; {
			ls, err := lifecycle.Serve(e, nil).Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err == nil {
				_ = ls.Release(ctx)
				break
			}
			if !errors.Is(err, lockcore.ErrRestartGuard) || time.Now().After(deadline) {
				t.Fatalf("acquisition after the guard: %v", err)
			}
			<-tick.C
		}
		if line, list, lock := guardShown(t, env, prefix); line || list != 0 || lock != 0 {
			t.Fatalf("after the guard: line %v, restart_guard_ms %v in ls, %v in inspect; want none", line, list, lock)
		}
	})

	for _, c := range []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"append-only file", func(t *testing.T) string {
			if s := redistest.OwnReal(t); s != nil {
				return s.Addr
			}
			return ""
		}},
		{"miniredis", func(t *testing.T) string { return redistest.Mini(t).Addr }},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := c.addr(t)
			if addr == "" {
				return
			}
			prefix := redistest.Prefix(t)
			ls, err := lifecycle.Serve(engine(t, addr, prefix), nil).Acquire(t.Context(), key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatalf("first acquisition: %v, want none refused", err)
			}
			defer ls.Release(t.Context())
			env := map[string]string{"REDIS_URL": "redis://" + addr + "/0"}
			if line, list, lock := guardShown(t, env, prefix); line || list != 0 || lock != 0 {
				t.Fatalf("line %v, restart_guard_ms %v in ls, %v in inspect; want none", line, list, lock)
			}
		})
	}
}
