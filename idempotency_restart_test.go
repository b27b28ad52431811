package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// TestIdempotencyRedisRestartedEmpty pins what a restart of Redis without
// persistence does to an idempotent route (every Engine with MaxTTL 1 s,
// leases of 500 ms):
//
//   - the stored results are gone with the rest of the data;
//   - a request whose handler runs across the restart loses its lease:
//     its context is cancelled with ErrLockLost, its response goes to its
//     client but is not stored; one whose handler returns right after the
//     restart, before its lease's renewal found the lease gone, stores
//     nothing either (the release script finds its hold gone);
//   - for MaxTTL after the server's start, the restart guard takes no
//     lock: a retry on a route that may not wait that long (FailFast) is
//     answered 503 with Retry-After, its handler not run;
//   - a retry on a route that waits longer than the guard waits it out;
//   - after the guard, every retry runs its handler again: a second run
//     of a key that had run to the end before the restart, and of those
//     that were running across it: a duplicate that was waiting in line
//     for one of them (its place in the queue lost with the rest) waits
//     the guard out and runs it again, after the first run's context was
//     cancelled. The second runs' responses are stored and replayed as
//     any, and their fencing tokens are above the first runs'.
func TestIdempotencyRedisRestartedEmpty(t *testing.T) {
	srv := redistest.OwnVolatile(t)
	if srv == nil {
		return
	}
	const maxTTL, ttl = time.Second, 500 * time.Millisecond
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	b := redistest.At(srv.Addr)
	// The server's first start is decided by a warm-up Engine with a
	// bound of 50 ms, so that the first requests get in at once.
	warm, err := redisengine.New(b.Universal(t), redisengine.Options{Prefix: prefix, TTL: 50 * time.Millisecond, MaxTTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Check(ctx); err != nil {
		t.Fatal(err)
	}
	_ = warm.Close()

	var mu sync.Mutex
	runs := map[string]int{}
	started := map[string]time.Time{} // each key's last run's start
	fences := map[string][]int64{}    // each key's runs' fencing tokens
	var lostAt time.Time
	var lostCause error
	inflight, returning, ret := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
	handler := func(w http.ResponseWriter, r *http.Request) {
		ik := r.Header.Get("Idempotency-Key")
		mu.Lock()
		runs[ik]++
		n := runs[ik]
		started[ik] = time.Now()
		fence, _ := lock.FencingToken(r.Context())
		fences[ik] = append(fences[ik], fence)
		mu.Unlock()
		if ik == "across" && n == 1 {
			inflight <- struct{}{}
			select {
			case <-r.Context().Done():
				mu.Lock()
				lostAt, lostCause = time.Now(), context.Cause(r.Context())
				mu.Unlock()
			case <-time.After(10 * time.Second):
			}
		}
		if ik == "returns" && n == 1 {
			returning <- struct{}{}
			<-ret
		}
		fmt.Fprintf(w, "run %d of %s", n, ik)
	}
	app := func(p lock.Policy) (*lock.Locker, string) {
		l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: prefix, TTL: ttl, MaxTTL: maxTTL})
		t.Cleanup(func() { _ = l.Close() })
		r := chi.NewRouter()
		r.With(middleware.Idempotency(l, middleware.IdempotencyConfig{Policy: p})).Post("/orders", handler)
		s := httptest.NewServer(r)
		t.Cleanup(s.Close)
		return l, s.URL + "/orders"
	}
	_, failFast := app(lock.FailFast())
	_, waits := app(lock.Wait(10 * time.Second))
	other, waitsToo := app(lock.Wait(10 * time.Second))
	client := &http.Client{Timeout: 20 * time.Second}

	var done answer
	eventually(t, 5*time.Second, "a first run once the warm-up's guard ended", func() bool {
		done = idemPost(t, client, failFast, "done", "")
		return done.status == http.StatusOK
	})
	if again := idemPost(t, client, waits, "done", ""); !again.replayed || string(again.body) != "run 1 of done" {
		t.Fatalf("the retry before the restart: %d %q (replayed %v), want the first run replayed", again.status, again.body, again.replayed)
	}
	if fast := idemPost(t, client, failFast, "fast", ""); fast.status != http.StatusOK || fast.replayed {
		t.Fatalf("a first run before the restart: %d %q (replayed %v)", fast.status, fast.body, fast.replayed)
	}
	across := make(chan answer, 1)
	go func() { across <- idemPost(t, client, waits, "across", "") }()
	select {
	case <-inflight:
	case <-time.After(10 * time.Second):
		t.Fatal("the request across the restart did not start in 10s")
	}

	// A duplicate of it waits in line on another instance.
	queued := make(chan answer, 1)
	go func() { queued <- idemPost(t, client, waitsToo, "across", "") }()
	eventually(t, 10*time.Second, "the duplicate waits in line", func() bool {
		return len(inspect(t, other, idemKey(t, "/orders", "across")).Waiters) == 1
	})
	returns := make(chan answer, 1)
	go func() { returns <- idemPost(t, client, waits, "returns", "") }()
	select {
	case <-returning:
	case <-time.After(10 * time.Second):
		t.Fatal("the request that returns after the restart did not start in 10s")
	}

	killed := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// A handler returns at once, most likely before its lease's renewal
	// finds the lease gone: its store must find it gone.
	close(ret)
	var rt answer
	select {
	case rt = <-returns:
	case <-time.After(10 * time.Second):
		t.Fatal("the request that returns after the restart got no answer in 10s")
	}
	if rt.status != http.StatusOK || rt.replayed || string(rt.body) != "run 1 of returns" {
		t.Errorf("the request that returned after the restart: %d %q (replayed %v), want its own response", rt.status, rt.body, rt.replayed)
	}
	if rs := storedResults(t, b, prefix); len(rs) != 0 {
		t.Errorf("stored results after the restart: %+v, want none", rs)
	}
	// A retry that may wait: it waits the guard out, then runs again.
	waited := make(chan answer, 1)
	go func() { waited <- idemPost(t, client, waits, "done", "") }()
	// A retry that may not: refused while the guard lasts.
	refused := 0
	var ran answer
	for deadline := time.Now().Add(5 * time.Second); ; {
		ran = idemPost(t, client, failFast, "fast", "")
		if ran.status != http.StatusServiceUnavailable {
			break
		}
		if !strings.HasSuffix(problemOf(t, ran), "#unavailable") || ran.retry != "1" {
			t.Fatalf("a refusal %v after the restart: %q, Retry-After %q; want #unavailable, Retry-After 1 (the guard's time left, at most 1 s)",
				time.Since(restarted).Round(time.Millisecond), ran.body, ran.retry)
		}
		refused++
		if time.Now().After(deadline) {
			t.Fatal("refused for 5s after the restart, with a guard of 1s")
		}
		time.Sleep(20 * time.Millisecond) // polling the guard's end, bounded by the deadline
	}
	guardEnded := time.Since(restarted)
	if refused == 0 || ran.status != http.StatusOK || ran.replayed {
		t.Errorf("after %d refusals: %d %q (replayed %v); want refusals while the guard lasts, then a run", refused, ran.status, ran.body, ran.replayed)
	}
	var w answer
	select {
	case w = <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the retry that waits got no answer in 10s")
	}
	waitedFor := time.Since(restarted)
	if w.status != http.StatusOK || w.replayed || string(w.body) != "run 2 of done" {
		t.Errorf("the retry of a request stored before the restart: %d %q (replayed %v), want a second run", w.status, w.body, w.replayed)
	}

	var a answer
	select {
	case a = <-across:
	case <-time.After(10 * time.Second):
		t.Fatal("the request across the restart got no answer in 10s")
	}
	mu.Lock()
	lost, cause := lostAt, lostCause
	mu.Unlock()
	if !errors.Is(cause, lockcore.ErrLockLost) || a.status != http.StatusOK || string(a.body) != "run 1 of across" || a.replayed {
		t.Errorf("the request across the restart: cause %v, answered %d %q (replayed %v); want ErrLockLost, and its response sent", cause, a.status, a.body, a.replayed)
	}
	var second answer
	select {
	case second = <-queued:
	case <-time.After(10 * time.Second):
		t.Fatal("the duplicate in line across the restart got no answer in 10s")
	}
	mu.Lock()
	secondStart := started["across"]
	mu.Unlock()
	if second.status != http.StatusOK || second.replayed || string(second.body) != "run 2 of across" || !secondStart.After(lost) {
		t.Errorf("the duplicate in line across the restart: %d %q (replayed %v), run at %v after the first one's lost context; want a second run, after it",
			second.status, second.body, second.replayed, secondStart.Sub(lost))
	}
	if r := idemPost(t, client, waits, "returns", ""); r.status != http.StatusOK || r.replayed || string(r.body) != "run 2 of returns" {
		t.Errorf("the retry of the request that returned after the restart: %d %q (replayed %v), want a second run", r.status, r.body, r.replayed)
	}
	mu.Lock()
	for ik, fs := range fences {
		if len(fs) == 2 && fs[1] <= fs[0] {
			t.Errorf("%s: the second run's fencing token %d is not above the first's %d", ik, fs[1], fs[0])
		}
	}
	mu.Unlock()
	for ik, body := range map[string]string{"done": "run 2 of done", "across": "run 2 of across", "fast": "run 2 of fast", "returns": "run 2 of returns"} {
		if r := idemPost(t, client, failFast, ik, ""); !r.replayed || string(r.body) != body {
			t.Errorf("a later retry of %s: %d %q (replayed %v), want %q replayed", ik, r.status, r.body, r.replayed, body)
		}
	}
	t.Logf("after the restart: the guard refused %d times, ended %v after it; the retry that waited ran %v after it; the lease across it was lost %v after the kill (the restart took %v), and its duplicate in line ran again %v after the restart",
		refused, guardEnded.Round(time.Millisecond), waitedFor.Round(time.Millisecond), lost.Sub(killed).Round(time.Millisecond), restarted.Sub(killed).Round(time.Millisecond),
		secondStart.Sub(restarted).Round(time.Millisecond))
}
