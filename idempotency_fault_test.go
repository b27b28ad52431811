package lock_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// TestIdempotencyKeepReplyLost: the reply to the call that stores the
// first request's response with its lock's release (the release script's
// EVALSHA with the result's key) is lost after the call ran, and go-redis,
// at its defaults (MaxRetries 3), sends the call again on a new
// connection. Meanwhile a duplicate, queued on another instance, was
// handed the lock by the first run, found the response stored and was
// answered with it, before the call is sent again. The call sent again
// finds its own result and succeeds: the response is stored once, nothing
// is logged as not stored, the first request's client gets the response
// fresh, the duplicate and a later retry get it replayed, and the handler
// ran once.
//
// The call is told by what only it carries to Redis: the response's body.
func TestIdempotencyKeepReplyLost(t *testing.T) {
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	p := faultproxy.Start(t, b.Addr)
	cut := redis.NewClient(&redis.Options{Addr: p.Addr}) // go-redis's defaults: MaxRetries 3
	t.Cleanup(func() { _ = cut.Close() })
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var runs atomic.Int64
	started, finish := make(chan struct{}, 1), make(chan struct{})
	app := func(rdb redis.UniversalClient) (*lock.Locker, string) {
		l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix})
		t.Cleanup(func() { _ = l.Close() })
		r := chi.NewRouter()
		r.With(middleware.Idempotency(l, middleware.IdempotencyConfig{Policy: lock.Wait(10 * time.Second), Logger: logger})).
			Post("/receipts/{id}", func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				if chi.URLParam(r, "id") == "held" {
					started <- struct{}{}
					<-finish
				}
				fmt.Fprintf(w, "receipt %s of run %d", chi.URLParam(r, "id"), runs.Load())
			})
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return l, srv.URL
	}
	_, cutURL := app(cut)
	direct, directURL := app(b.Universal(t))
	client := &http.Client{Timeout: 20 * time.Second}

	// A first request through the proxy loads the scripts: the call whose
	// reply is lost is then an EVALSHA, as in a service that has run.
	if a := idemPost(t, client, cutURL+"/receipts/warm", "warm", ""); a.status != http.StatusOK {
		t.Fatalf("warm-up: %d %q", a.status, a.body)
	}
	var mark [8]byte
	_, _ = rand.Read(mark[:])
	ik := "keep-lost-" + hex.EncodeToString(mark[:])
	k := idemKey(t, "/receipts/{id}", ik)
	// Only the call that stores this response carries it through the
	// proxy, which only this test's instance uses.
	want := "receipt held of run 2"
	first, dup := make(chan answer, 1), make(chan answer, 1)
	go func() { first <- idemPost(t, client, cutURL+"/receipts/held", ik, "") }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request's handler did not start in 10s")
	}
	go func() { dup <- idemPost(t, client, directURL+"/receipts/held", ik, "") }()
	eventually(t, 10*time.Second, "the duplicate waits in line", func() bool { return len(inspect(t, direct, k).Waiters) == 1 })

	var dupBeforeResend answer
	var dupAnswered bool
	p.AfterLoss(func() {
		// Between the two tries: the duplicate, handed the lock by the
		// first, reads the stored response and is answered.
		select {
		case dupBeforeResend = <-dup:
			dupAnswered = true
		case <-time.After(10 * time.Second):
		}
	})
	p.LoseReplyTo([]byte(want), 1)
	close(finish)
	var a answer
	select {
	case a = <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("the first request got no answer in 20s")
	}
	if p.LostReplies() != 1 {
		t.Fatalf("%d replies lost: the fault did not happen", p.LostReplies())
	}
	if !dupAnswered {
		t.Fatal("the duplicate got no answer between the two tries of the call")
	}
	retry := idemPost(t, client, cutURL+"/receipts/held", ik, "")
	if a.status != http.StatusOK || string(a.body) != want || a.replayed {
		t.Errorf("the first request: %d %q (replayed %v), want 200 %q fresh", a.status, a.body, a.replayed, want)
	}
	for _, x := range []struct {
		what string
		a    answer
	}{{"the duplicate", dupBeforeResend}, {"the retry", retry}} {
		if x.a.status != http.StatusOK || string(x.a.body) != want || !x.a.replayed {
			t.Errorf("%s: %d %q (replayed %v), want 200 %q replayed", x.what, x.a.status, x.a.body, x.a.replayed, want)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want twice: the warm-up and the first request", n)
	}
	if logs.String() != "" {
		t.Errorf("logged: %s; want the store that landed before the lost reply reported as such", logs.String())
	}
	if rs := storedResults(t, b, prefix); len(rs) != 2 {
		t.Errorf("stored results: %+v, want the warm-up's and the first request's", rs)
	}
}

// TestIdempotencyKeepUnanswered: the call that stores the first request's
// response with its lock's release gets no answer within the engine's
// ReleaseTimeout (Redis out of reach: the proxy drops everything), so the
// first request's client gets its response and the instance logs that it
// may not be stored. Once Redis is back, the call is sent again in the
// background, with the response: it stores it and frees the key, and the
// duplicate that was waiting in line on another instance gets it
// replayed; the handler ran once. (Sending a plain release again instead
// would free the key without the response, and the duplicate would run
// the handler a second time.)
func TestIdempotencyKeepUnanswered(t *testing.T) {
	t.Parallel() // waits out deadlines and leases, on keys of its own
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	p := faultproxy.Start(t, b.Addr)
	cut := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { _ = cut.Close() })
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var runs atomic.Int64
	started, finish := make(chan struct{}, 1), make(chan struct{})
	app := func(rdb redis.UniversalClient) (*lock.Locker, string) {
		l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix, ReleaseTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = l.Close() })
		r := chi.NewRouter()
		r.With(middleware.Idempotency(l, middleware.IdempotencyConfig{Policy: lock.Wait(20 * time.Second), Logger: logger})).
			Post("/receipts", func(w http.ResponseWriter, r *http.Request) {
				n := runs.Add(1)
				if n == 1 {
					started <- struct{}{}
					<-finish
				}
				fmt.Fprintf(w, "receipt of run %d", n)
			})
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return l, srv.URL + "/receipts"
	}
	_, cutURL := app(cut)
	direct, directURL := app(b.Universal(t))
	client := &http.Client{Timeout: 20 * time.Second}
	const ik = "keep-unanswered"

	first, dup := make(chan answer, 1), make(chan answer, 1)
	go func() { first <- idemPost(t, client, cutURL, ik, "") }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request's handler did not start in 10s")
	}
	go func() { dup <- idemPost(t, client, directURL, ik, "") }()
	eventually(t, 10*time.Second, "the duplicate waits in line", func() bool {
		return len(inspect(t, direct, idemKey(t, "/receipts", ik)).Waiters) == 1
	})
	p.Blackhole(true)
	close(finish)
	var a answer
	select {
	case a = <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request got no answer in 10s")
	}
	if a.status != http.StatusOK || a.replayed || string(a.body) != "receipt of run 1" {
		t.Errorf("the first request: %d %q (replayed %v), want its response", a.status, a.body, a.replayed)
	}
	if !strings.Contains(logs.String(), "may not be stored") {
		t.Errorf("logged %q, want the store's failure", logs.String())
	}
	p.Blackhole(false)
	var d answer
	select {
	case d = <-dup:
	case <-time.After(20 * time.Second):
		t.Fatal("the duplicate got no answer in 20s")
	}
	retry := idemPost(t, client, directURL, ik, "")
	for _, x := range []struct {
		what string
		a    answer
	}{{"the duplicate", d}, {"the retry", retry}} {
		if x.a.status != http.StatusOK || !x.a.replayed || string(x.a.body) != "receipt of run 1" {
			t.Errorf("%s: %d %q (replayed %v), want the first run's response replayed", x.what, x.a.status, x.a.body, x.a.replayed)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
}
