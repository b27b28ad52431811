package lock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// TestIdempotencyClientGoneFirstRunCompletes: a client that gives up on
// its request (its timeout, a dropped connection) and retries with the
// same key is the case idempotency keys exist for. The first run goes on
// to its end once its client has gone, and the retry gets its result:
// the handler's calls that honour its context are not cut short by the
// client's leaving, and no aborted answer is stored for the key.
func TestIdempotencyClientGoneFirstRunCompletes(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer l.Close()
	started := make(chan struct{}, 4)
	var charged, aborted atomic.Int32
	r := chi.NewRouter()
	r.With(l.Idempotent()).Post("/charges", func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		// The payment provider's call, which honours the context as
		// idiomatic Go code does.
		select {
		case <-time.After(300 * time.Millisecond):
			n := charged.Add(1)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "charge %d", n)
		case <-r.Context().Done():
			aborted.Add(1)
			http.Error(w, "the provider's call was cut short", http.StatusBadGateway)
		}
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	// The client gives up as soon as the handler has started.
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/charges", strings.NewReader("amount=100"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "ch-41d7")
	gone := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	<-started
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first request: %v, want cancelled by its client", err)
	}

	// Its retry.
	a := idemPost(t, srv.Client(), srv.URL+"/charges", "ch-41d7", "amount=100")
	if a.status != http.StatusCreated || string(a.body) != "charge 1" || charged.Load() != 1 || aborted.Load() != 0 {
		t.Errorf("the retry: %d %q (replayed %v); charged %d, aborted %d; want the first run's 201 \"charge 1\", run to its end once",
			a.status, a.body, a.replayed, charged.Load(), aborted.Load())
	}
}

// TestIdempotencyReplayHeadersAsSent: a replay's headers are those of the
// first response, line for line, when a middleware outside the
// idempotent one sets a header it stores (chi's SetHeader and NoCache,
// common on API routers): not each of them twice.
func TestIdempotencyReplayHeadersAsSent(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer l.Close()
	r := chi.NewRouter()
	r.Use(chimw.SetHeader("Content-Type", "application/json"), chimw.NoCache)
	r.With(l.Idempotent()).Post("/orders", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/7")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":7}`)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	send := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "o-77")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	first, replay := send(), send()
	if replay.Header.Get("Idempotent-Replayed") != "true" || replay.StatusCode != first.StatusCode {
		t.Fatalf("the replay: %d %v, want %d, marked", replay.StatusCode, replay.Header, first.StatusCode)
	}
	for _, h := range []string{"Content-Type", "Cache-Control", "Location"} {
		if !slices.Equal(first.Header[h], replay.Header[h]) {
			t.Errorf("%s: first %q, replay %q", h, first.Header[h], replay.Header[h])
		}
	}
}

// TestIdempotencyWaiterGoneLogsNoCaller: a duplicate waiting in line for
// the key's lock (on another instance) whose client goes away is refused,
// and whatever is logged of it names the route, never the caller or the
// key (docs/idempotency.md; IdempotencyConfig.Logger).
func TestIdempotencyWaiterGoneLogsNoCaller(t *testing.T) {
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	var logs bytes.Buffer
	var mu chan struct{} = make(chan struct{}, 1)
	mu <- struct{}{}
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		<-mu
		defer func() { mu <- struct{}{} }()
		return logs.Write(p)
	}), nil))
	started, finish := make(chan struct{}, 4), make(chan struct{})
	app := func() *httptest.Server {
		l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: prefix})
		t.Cleanup(func() { _ = l.Close() })
		r := chi.NewRouter()
		r.With(middleware.Idempotency(l, middleware.IdempotencyConfig{
			Caller: func(*http.Request) (string, error) { return "tenant-9c41e2", nil },
			Logger: logger,
		})).Post("/transfers", func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			select {
			case <-finish:
			case <-time.After(10 * time.Second):
			}
			fmt.Fprint(w, "done")
		})
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return srv
	}
	one, two := app(), app()
	first := make(chan answer, 1)
	go func() { first <- idemPost(t, one.Client(), one.URL+"/transfers", "tr-5be0c2", "x") }()
	<-started

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, two.URL+"/transfers", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "tr-5be0c2")
	if resp, err := two.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the duplicate was answered %d before its client left", resp.StatusCode)
	}
	close(finish)
	if a := <-first; a.status != http.StatusOK {
		t.Fatalf("the first: %d %q", a.status, a.body)
	}
	// The second instance's refusal is logged, if at all, before its
	// handler chain returns; the server closes after it.
	two.Close()
	<-mu
	s := logs.String()
	mu <- struct{}{}
	if strings.Contains(s, "tenant-9c41e2") || strings.Contains(s, "5be0c2") {
		t.Errorf("the log names the caller or the key: %s", s)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestIdempotencyLostStoreLogsNoCaller: the line logged for a result
// whose store was lost with its lease names the route, not the caller,
// whom the lookup key (and so any error that quotes it) carries.
func TestIdempotencyLostStoreLogsNoCaller(t *testing.T) {
	b := redistest.Best(t)
	rdb := b.Universal(t)
	prefix := redistest.Prefix(t)
	l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix})
	defer l.Close()
	var logs bytes.Buffer
	r := chi.NewRouter()
	r.With(middleware.Idempotency(l, middleware.IdempotencyConfig{Caller: func(*http.Request) (string, error) { return "tenant-0d93aa", nil },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})).Post("/orders", func(w http.ResponseWriter, r *http.Request) {
		// The key's lock vanishes under the handler, as when its lease
		// ran out in Redis.
		keys, err := scanAll(rdb, prefix+"*")
		if err != nil || len(keys) == 0 {
			t.Errorf("the lock's keys: %v %v", keys, err)
		}
		for _, k := range keys {
			if !strings.HasSuffix(k, ":f") {
				rdb.Del(context.Background(), k)
			}
		}
		fmt.Fprint(w, "ran")
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	idemPost(t, srv.Client(), srv.URL+"/orders", "o-2-77c1", "card=4242")
	s := logs.String()
	if !strings.Contains(s, "not stored") {
		t.Fatalf("the lost store is not logged: %q", s)
	}
	if strings.Contains(s, "tenant-0d93aa") {
		t.Errorf("the log names the caller: %s", s)
	}
}

// TestIdempotencyStalledClientHoldsNoDuplicate: once the first request's
// response is stored, a duplicate on the same instance gets it, even
// while the first's client has stopped reading its response (a stalled
// mobile connection whose client gave up and retries): the duplicate
// does not wait on the first's write, nor get 409 when that outlasts its
// wait.
func TestIdempotencyStalledClientHoldsNoDuplicate(t *testing.T) {
	b := redistest.Best(t)
	rdb := b.Universal(t)
	prefix := redistest.Prefix(t)
	l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix})
	defer l.Close()
	const size = 8 << 20
	r := chi.NewRouter()
	r.With(middleware.Idempotency(l, middleware.IdempotencyConfig{MaxStored: 16 << 20, Policy: lock.Wait(2 * time.Second)})).
		Post("/exports", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/csv")
			_, _ = w.Write(bytes.Repeat([]byte("x"), size))
		})
	srv := httptest.NewServer(r)
	defer srv.Close()

	// The first client sends its request and reads nothing back.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "POST /exports HTTP/1.1\r\nHost: app\r\nIdempotency-Key: ex-1\r\nContent-Length: 1\r\n\r\nq"); err != nil {
		t.Fatal(err)
	}
	// Its response is stored.
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys, err := scanAll(rdb, prefix+"*:k")
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first response was not stored")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a := idemPost(t, srv.Client(), srv.URL+"/exports", "ex-1", "q")
	if a.status != http.StatusOK || !a.replayed || len(a.body) != size {
		t.Errorf("the retry while the first's client stalls: %d, %d bytes (replayed %v), want the stored 200, %d bytes", a.status, len(a.body), a.replayed, size)
	}
}

// TestIdempotencyKeyField: the Idempotency-Key field's values as
// docs/idempotency.md takes and refuses them: one Structured Field
// string, or a bare run of visible characters, 1 to 255 characters; two
// field lines, an empty or unterminated string, a control or non-ASCII
// character, or 256 characters: 400 #malformed-key, whose body repeats
// none of it.
func TestIdempotencyKeyField(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer l.Close()
	r := chi.NewRouter()
	r.With(l.Idempotent()).Post("/k", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ran") })
	srv := httptest.NewServer(r)
	defer srv.Close()
	long := strings.Repeat("k", 255)
	for _, c := range []struct {
		lines []string
		ok    bool
	}{
		{[]string{`"abc-1"`}, true},
		{[]string{`abc-2`}, true},
		{[]string{` "abc-3" `}, true},
		{[]string{`"a \"quoted\" \\ key"`}, true},
		{[]string{`"` + long + `"`}, true},
		{[]string{long[:254] + "z"}, true},
		{[]string{`"` + long + `k"`}, false},
		{[]string{long + "k"}, false},
		{[]string{`""`}, false},
		{[]string{``}, false},
		{[]string{`"abc`}, false},
		{[]string{`"ab"c"`}, false},
		{[]string{`"a\nb"`}, false},
		{[]string{"\"a\tb\""}, false},
		{[]string{"\"caf\u00e9\""}, false},
		{[]string{"caf\u00e9"}, false},
		{[]string{`a b`}, false},
		{[]string{`"x-1"`, `"x-2"`}, false},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/k", strings.NewReader("p"))
		req.Header["Idempotency-Key"] = c.lines
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case c.ok && resp.StatusCode != http.StatusOK:
			t.Errorf("%q: %d %s, want 200", c.lines, resp.StatusCode, body)
		case !c.ok && (resp.StatusCode != http.StatusBadRequest || !bytes.Contains(body, []byte("#malformed-key"))):
			t.Errorf("%q: %d %s, want 400 #malformed-key", c.lines, resp.StatusCode, body)
		case !c.ok && len(c.lines[0]) > 3 && bytes.Contains(body, []byte(strings.Trim(c.lines[0], `" `))):
			t.Errorf("%q: the refusal repeats the key: %s", c.lines, body)
		}
	}
}

// TestIdempotencyHandlerWays: what a handler does to its response, and
// what its retries get. A panic: a 500 problem, stored, for a duplicate
// that waited and for a later retry, the handler run once. A flush
// (http.ResponseController) or a hijack: the response goes out, and a
// retry gets 410 marked as a replay. An informational 103 before the
// response, a second WriteHeader: the stored response is the one the
// client got, byte for byte.
func TestIdempotencyHandlerWays(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer l.Close()
	var runs atomic.Int32
	started, finish := make(chan struct{}, 4), make(chan struct{})
	r := chi.NewRouter()
	r.With(l.Idempotent()).Post("/panics", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		started <- struct{}{}
		<-finish
		panic("the handler's bug")
	})
	r.With(l.Idempotent()).Post("/flushes", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		fmt.Fprint(w, "part 1;")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		fmt.Fprint(w, "part 2")
	})
	r.With(l.Idempotent()).Post("/hijacks", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 202 Accepted\r\nContent-Length: 4\r\nConnection: close\r\n\r\nmine")
		_ = buf.Flush()
	})
	r.With(l.Idempotent()).Post("/hints", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, `{"ok":true}`)
	})
	srv := httptest.NewUnstartedServer(r)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	defer srv.Close()
	c := srv.Client()

	// A panic.
	first := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/panics", strings.NewReader("p"))
		req.Header.Set("Idempotency-Key", "p-1")
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		first <- err
	}()
	<-started
	dup := make(chan answer, 1)
	go func() { dup <- idemPost(t, c, srv.URL+"/panics", "p-1", "p") }()
	close(finish)
	if err := <-first; err == nil {
		t.Errorf("the request whose handler panicked was answered")
	}
	for i, a := range []answer{<-dup, idemPost(t, c, srv.URL+"/panics", "p-1", "p")} {
		if a.status != http.StatusInternalServerError || !a.replayed || !bytes.Contains(a.body, []byte("#failed")) {
			t.Errorf("after a panic, request %d: %d %s (replayed %v), want the stored 500 #failed", i+2, a.status, a.body, a.replayed)
		}
	}

	// A flush, a hijack.
	if a := idemPost(t, c, srv.URL+"/flushes", "f-1", "p"); a.status != http.StatusOK || string(a.body) != "part 1;part 2" || a.replayed {
		t.Errorf("the flushed response: %d %q", a.status, a.body)
	}
	if a := idemPost(t, c, srv.URL+"/flushes", "f-1", "p"); a.status != http.StatusGone || !a.replayed || !bytes.Contains(a.body, []byte("#not-stored")) || !bytes.Contains(a.body, []byte("flushed")) {
		t.Errorf("the retry of a flushed response: %d %s (replayed %v), want 410 #not-stored", a.status, a.body, a.replayed)
	}
	if a := idemPost(t, c, srv.URL+"/hijacks", "h-1", "p"); a.status != http.StatusAccepted || string(a.body) != "mine" {
		t.Errorf("the hijacked response: %d %q", a.status, a.body)
	}
	if a := idemPost(t, c, srv.URL+"/hijacks", "h-1", "p"); a.status != http.StatusGone || !a.replayed || !bytes.Contains(a.body, []byte("hijacked")) {
		t.Errorf("the retry of a hijacked response: %d %s (replayed %v), want 410 #not-stored", a.status, a.body, a.replayed)
	}

	// An informational response first, WriteHeader twice.
	send := func() (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/hints", strings.NewReader("p"))
		req.Header.Set("Idempotency-Key", "i-1")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	one, body1 := send()
	two, body2 := send()
	if one.StatusCode != http.StatusCreated || two.StatusCode != one.StatusCode || !bytes.Equal(body1, body2) ||
		two.Header.Get("Content-Type") != one.Header.Get("Content-Type") || two.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("after 103 and two WriteHeaders: first %d %q %v, replay %d %q %v", one.StatusCode, body1, one.Header, two.StatusCode, body2, two.Header)
	}
	if n := runs.Load(); n != 4 {
		t.Errorf("the handlers ran %d times, want once each", n)
	}
}

// TestIdempotencyMaxHoldDuringRun: a handler that runs past the route's
// MaxHold loses its lease: its context ends with ErrMaxHold, nothing is
// stored, its response goes to its client, and the key's lock is free:
// a retry runs at once, and its result is stored.
func TestIdempotencyMaxHoldDuringRun(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer l.Close()
	var runs atomic.Int32
	causes := make(chan error, 4)
	r := chi.NewRouter()
	r.With(l.Idempotent(lock.MaxHold(300*time.Millisecond), lock.FailFast())).Post("/slow", func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if n == 1 {
			select {
			case <-r.Context().Done():
				causes <- context.Cause(r.Context())
			case <-time.After(5 * time.Second):
				causes <- nil
			}
		}
		fmt.Fprintf(w, "run %d", n)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	c := srv.Client()
	if a := idemPost(t, c, srv.URL+"/slow", "s-1", "p"); a.status != http.StatusOK || string(a.body) != "run 1" || a.replayed {
		t.Errorf("the run past its MaxHold: %d %q (replayed %v)", a.status, a.body, a.replayed)
	}
	if err := <-causes; !errors.Is(err, lockcore.ErrMaxHold) {
		t.Errorf("the handler's context ended with %v, want ErrMaxHold", err)
	}
	// FailFast: a lock left held answers 409. The ceiling's release goes
	// to Redis beside the handler's end, so a retry may come before it
	// lands; within a bound, the lock is free and the retry runs.
	a := idemPost(t, c, srv.URL+"/slow", "s-1", "p")
	for end := time.Now().Add(5 * time.Second); a.status == http.StatusConflict && time.Now().Before(end); {
		<-time.After(10 * time.Millisecond)
		a = idemPost(t, c, srv.URL+"/slow", "s-1", "p")
	}
	if a.status != http.StatusOK || string(a.body) != "run 2" || a.replayed {
		t.Errorf("the retry: %d %q (replayed %v), want run 2", a.status, a.body, a.replayed)
	}
	if a := idemPost(t, c, srv.URL+"/slow", "s-1", "p"); a.status != http.StatusOK || string(a.body) != "run 2" || !a.replayed {
		t.Errorf("the next retry: %d %q (replayed %v), want run 2 replayed", a.status, a.body, a.replayed)
	}
}

// TestIdempotencyWaitEndsAtDeadline: a duplicate waiting in line for the
// key's lock (on another instance) waits no longer than its request's
// deadline, which the server set (chi's Timeout), and is answered 409
// #in-progress with Retry-After; the first, whose client stays, runs to
// its end and its result is stored.
func TestIdempotencyWaitEndsAtDeadline(t *testing.T) {
	t.Parallel() // waits out deadlines and leases, on keys of its own
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	started, finish := make(chan struct{}, 4), make(chan struct{})
	var runs atomic.Int32
	app := func() *httptest.Server {
		l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: prefix})
		t.Cleanup(func() { _ = l.Close() })
		r := chi.NewRouter()
		r.Use(chimw.Timeout(3 * time.Second))
		r.With(l.Idempotent()).Post("/jobs", func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			started <- struct{}{}
			<-finish
			fmt.Fprint(w, "done")
		})
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return srv
	}
	one, two := app(), app()
	first := make(chan answer, 1)
	go func() { first <- idemPost(t, one.Client(), one.URL+"/jobs", "j-1", "p") }()
	<-started
	begin := time.Now()
	req, _ := http.NewRequest(http.MethodPost, two.URL+"/jobs", strings.NewReader("p"))
	req.Header.Set("Idempotency-Key", "j-1")
	resp, err := two.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(begin)
	close(finish)
	if resp.StatusCode != http.StatusConflict || !bytes.Contains(body, []byte("#in-progress")) || resp.Header.Get("Retry-After") == "" || took > 4500*time.Millisecond {
		t.Errorf("the duplicate: %d %s, Retry-After %q, after %v; want 409 #in-progress at its deadline (3s), before the wait's 5s", resp.StatusCode, body, resp.Header.Get("Retry-After"), took)
	}
	if a := <-first; a.status != http.StatusOK || string(a.body) != "done" {
		t.Errorf("the first: %d %q", a.status, a.body)
	}
	if a := idemPost(t, two.Client(), two.URL+"/jobs", "j-1", "p"); !a.replayed || string(a.body) != "done" || runs.Load() != 1 {
		t.Errorf("a retry: %d %q (replayed %v), %d runs", a.status, a.body, a.replayed, runs.Load())
	}
}

// TestIdempotencyNestedCallInProgress: a handler that calls its own route
// with its own key (its owner token propagated, middleware.Transport),
// which lands on another instance, is refused at once there as the
// request in progress: 409 #in-progress, with Retry-After as
// docs/idempotency.md says of every #in-progress refusal.
func TestIdempotencyNestedCallInProgress(t *testing.T) {
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	var other string
	nested := make(chan *http.Response, 1)
	app := func() *httptest.Server {
		l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: prefix})
		t.Cleanup(func() { _ = l.Close() })
		r := chi.NewRouter()
		r.With(l.ByParam("account"), l.Idempotent()).Post("/accounts/{account}/transfers", func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Nested") == "" {
				req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, other+r.URL.Path, strings.NewReader("100"))
				req.Header.Set("Idempotency-Key", r.Header.Get("Idempotency-Key"))
				req.Header.Set("X-Nested", "1")
				resp, err := (&http.Client{Transport: middleware.Transport(nil)}).Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				nested <- resp
			}
			fmt.Fprint(w, "moved")
		})
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return srv
	}
	one, two := app(), app()
	other = two.URL
	if a := idemPost(t, one.Client(), one.URL+"/accounts/a-1/transfers", "n-1", "100"); a.status != http.StatusOK {
		t.Fatalf("the outer call: %d %s", a.status, a.body)
	}
	resp := <-nested
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("the nested call: %d, Retry-After %q; want 409 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestIdempotencyRoutesApartUnderUse: the middleware put on a router
// (Use, in a group, or in a subrouter before its routes are matched) scopes keys by
// each route's template: the same key and payload sent to two routes runs
// each route's handler, and a fingerprint that covers the body alone
// (IdempotencyConfig.Fingerprint) replays neither route's result on the
// other.
func TestIdempotencyRoutesApartUnderUse(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer l.Close()
	idem := middleware.Idempotency(l, middleware.IdempotencyConfig{Fingerprint: func(_ *http.Request, body []byte) []byte { return body }})
	r := chi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(idem)
		r.Post("/refunds/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "refund "+chi.URLParam(r, "id")) })
		r.Post("/charges/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "charge "+chi.URLParam(r, "id")) })
	})
	r.Route("/v2", func(r chi.Router) {
		r.Use(idem)
		r.Post("/refunds/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "v2 refund "+chi.URLParam(r, "id")) })
		r.Post("/charges/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "v2 charge "+chi.URLParam(r, "id")) })
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	c := srv.Client()
	for _, p := range []struct{ path, want string }{
		{"/charges/1", "charge 1"}, {"/refunds/1", "refund 1"}, {"/v2/charges/1", "v2 charge 1"}, {"/v2/refunds/1", "v2 refund 1"},
	} {
		if a := idemPost(t, c, srv.URL+p.path, "same-key", "amount=5"); a.status != http.StatusOK || string(a.body) != p.want || a.replayed {
			t.Errorf("%s: %d %q (replayed %v), want %q run", p.path, a.status, a.body, a.replayed, p.want)
		}
	}
}

// TestIdempotencyKeySpellings: one key spelled the ways the field allows
// (a quoted string, the same unquoted, with spaces around, the field's
// name in another case on the wire) is one key: the handler runs once and
// the others are replays of it.
func TestIdempotencyKeySpellings(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer l.Close()
	var runs atomic.Int64
	r := chi.NewRouter()
	r.With(l.Idempotent()).Post("/k", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "run ", runs.Add(1))
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	for i, c := range []struct{ name, value string }{
		{"Idempotency-Key", `"order-7"`},
		{"Idempotency-Key", `order-7`},
		{"Idempotency-Key", ` "order-7"	`},
		{"idempotency-key", `order-7`},
		{"IDEMPOTENCY-KEY", `"order-7"`},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/k", strings.NewReader("p"))
		req.Header[c.name] = []string{c.value} // as spelled on the wire
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		replayed := resp.Header.Get("Idempotent-Replayed") == "true"
		if resp.StatusCode != http.StatusOK || string(body) != "run 1" || replayed != (i > 0) {
			t.Errorf("%s: %q: %d %q, replayed %v; want 200 \"run 1\", a replay after the first", c.name, c.value, resp.StatusCode, body, replayed)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times for one key spelled five ways, want once", n)
	}
}

// TestIdempotencyMountedTwice: one Idempotency middleware mounted on a
// router and again on its subrouter acts once: the handler runs once,
// its response is stored once, and a retry replays it. Before, the inner
// pass waited for the outer one, itself, for the route's whole wait.
func TestIdempotencyMountedTwice(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer l.Close()
	idem := l.Idempotent(lock.Wait(time.Minute))
	var runs atomic.Int64
	r := chi.NewRouter()
	r.Use(idem)
	r.Route("/api", func(r chi.Router) {
		r.Use(idem)
		r.Post("/k", func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "run %d of %s", runs.Add(1), body)
		})
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	client := &http.Client{Timeout: 10 * time.Second} // far under the route's wait
	for i := range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/k", strings.NewReader("p"))
		req.Header.Set("Idempotency-Key", "twice")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		replayed := resp.Header.Get("Idempotent-Replayed") == "true"
		if resp.StatusCode != http.StatusCreated || string(body) != "run 1 of p" || replayed != (i == 1) {
			t.Fatalf("request %d: %d %q, replayed %v; want 201 \"run 1 of p\", a replay the second time", i, resp.StatusCode, body, replayed)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
}
