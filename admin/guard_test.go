package admin_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

const guardBanner = "Redis restarted without its data: no lock is taken for "

// guardShown returns what the handler that get asks shows of the restart guard:
// whether the page has the banner, and the restart_guard_ms of the list's
// and of one lock's JSON (0 when left out), failing the test on an answer
// that is not 200.
func guardShown(t *testing.T, get func(path string, html bool) resp) (banner bool, list, lock float64) {
	t.Helper()
	page := get("/admin/", true)
	if page.code != 200 {
		t.Fatalf("page: %d %s", page.code, page.body)
	}
	banner = strings.Contains(page.body, guardBanner) && strings.Contains(page.body, " more (restart guard)")
	for _, c := range []struct {
		path string
		ms   *float64
	}{{"/admin/locks", &list}, {"/admin/locks/productID:42", &lock}} {
		r := get(c.path, false)
		var v map[string]any
		if r.code != 200 || json.Unmarshal([]byte(r.body), &v) != nil {
			t.Fatalf("GET %s: %d %s", c.path, r.code, r.body)
		}
		if ms, ok := v["restart_guard_ms"]; ok {
			*c.ms = ms.(float64)
			if *c.ms <= 0 {
				t.Fatalf("GET %s: restart_guard_ms %v, want it left out or positive", c.path, ms)
			}
		}
	}
	return banner, list, lock
}

// TestRestartGuardShown: on a redis-server started without persistence,
// the restart guard refuses fresh locks for the engines' MaxTTL (1 s
// here); meanwhile the page says so in a banner and the JSON of the list
// and of a lock has restart_guard_ms, at most the guard's length; once an
// acquisition succeeds again (the guard is over), neither shows it. On a
// server with an append-only file and on miniredis, which keep no guard,
// neither ever shows it.
func TestRestartGuardShown(t *testing.T) {
	const maxTTL = time.Second
	key, err := lockcore.NewKey("productID", "42")
	if err != nil {
		t.Fatal(err)
	}
	setup := func(t *testing.T, b *redistest.Backend) (*redisengine.Engine, func(string, bool) resp) {
		e, err := redisengine.New(b.Client(t), redisengine.Options{Prefix: redistest.Prefix(t), TTL: maxTTL / 2, MaxTTL: maxTTL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		srv := mount(t, admin.Handler(e, admin.Config{}))
		return e, func(path string, html bool) resp {
			if html {
				return do(t, srv, "GET", path, "", browser...)
			}
			return do(t, srv, "GET", path, "")
		}
	}

	t.Run("no persistence", func(t *testing.T) {
		s := redistest.OwnVolatile(t)
		if s == nil {
			return
		}
		e, get := setup(t, redistest.At(s.Addr))
		ctx := t.Context()
		_, err := lifecycle.Serve(e, nil).Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		var ge *lockcore.RestartGuardError
		if !errors.As(err, &ge) {
			t.Fatalf("first acquisition on a fresh server: %v, want the restart guard's refusal", err)
		}
		banner, list, lock := guardShown(t, get)
		if !banner || list <= 0 || list > float64(maxTTL.Milliseconds()) || lock <= 0 || lock > float64(maxTTL.Milliseconds()) {
			t.Fatalf("while the guard lasts (%v left at the refusal): banner %v, restart_guard_ms %v in the list, %v in the lock; want a banner and 0 < ms <= %d",
				ge.RetryAfter, banner, list, lock, maxTTL.Milliseconds())
		}
		t.Logf("while the guard lasts: restart_guard_ms %v in the list, %v in the lock (%v left at the refusal)", list, lock, ge.RetryAfter)

		// The guard ends: an acquisition succeeds again.
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
		if banner, list, lock := guardShown(t, get); banner || list != 0 || lock != 0 {
			t.Fatalf("after the guard: banner %v, restart_guard_ms %v in the list, %v in the lock; want none", banner, list, lock)
		}
	})

	for _, c := range []struct {
		name    string
		backend func(t *testing.T) *redistest.Backend
	}{
		{"append-only file", func(t *testing.T) *redistest.Backend {
			if s := redistest.OwnReal(t); s != nil {
				return redistest.At(s.Addr)
			}
			return nil
		}},
		{"miniredis", func(t *testing.T) *redistest.Backend { return redistest.Mini(t) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := c.backend(t)
			if b == nil {
				return
			}
			e, get := setup(t, b)
			ls, err := lifecycle.Serve(e, nil).Acquire(t.Context(), key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatalf("first acquisition: %v, want none refused", err)
			}
			defer ls.Release(t.Context())
			if banner, list, lock := guardShown(t, get); banner || list != 0 || lock != 0 {
				t.Fatalf("banner %v, restart_guard_ms %v in the list, %v in the lock; want none", banner, list, lock)
			}
		})
	}
}
