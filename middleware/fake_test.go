package middleware_test

// Tests of the middleware on the in-memory engine (lockcore/locktest):
// no Redis, real chi routers on real httptest servers, judged by what a
// client and the handler see.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/keylimit"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/middleware"
)

// fakeBound bounds every wait of these tests, so that a broken adapter
// fails instead of hanging.
const fakeBound = 10 * time.Second

func fakeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), fakeBound)
	t.Cleanup(cancel)
	return ctx
}

func fakeKey(t *testing.T, parts ...string) lockcore.Key {
	t.Helper()
	k, err := lockcore.NewKey(parts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// fakeServe serves h on a loopback httptest server, closed when the test
// ends.
func fakeServe(t *testing.T, h http.Handler) *httptest.Server {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// fakeClient returns a client that propagates owner tokens
// (middleware.Transport) on a transport of its own, whose connections are
// closed when the test ends.
func fakeClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: middleware.Transport(tr), Timeout: fakeBound}
}

// do sends a request and returns the response with its body read.
func do(t *testing.T, c *http.Client, ctx context.Context, method, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// fenceOf returns the X-Fence header of resp as a number.
func fenceOf(resp *http.Response) int64 {
	f, _ := strconv.ParseInt(resp.Header.Get("X-Fence"), 10, 64)
	return f
}

// okHandler answers 200 with the fencing token of its context in X-Fence
// and counts its runs.
func okHandler(runs *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		f, _ := enginetest.Fence(r.Context())
		w.Header().Set("X-Fence", strconv.FormatInt(f, 10))
	}
}

// TestFakePolicies: Config.Policy reaches the engine as it was given: the
// zero Policy (the engine's defaults), a wait and a TTL, fail fast; with
// the route, which the engine, an Operator, shows to operators.
func TestFakePolicies(t *testing.T) {
	e := newFake()
	var runs atomic.Int32
	r := chi.NewRouter()
	for _, rt := range []struct {
		path string
		c    middleware.Config
	}{
		{"/default/{id}", middleware.Config{}},
		{"/wait/{id}", middleware.Config{Policy: lifecycle.Policy{Wait: 2 * time.Second, TTL: 3 * time.Second}}},
		{"/failfast/{id}", middleware.Config{Policy: lifecycle.Policy{Wait: lockcore.FailFast}}},
		{"/ttl/{id}", middleware.Config{Policy: lifecycle.Policy{TTL: 30 * time.Millisecond}}},
	} {
		rt.c.Key = keyfunc.Param("id")
		r.With(middleware.Lock(e, rt.c)).Post(rt.path, okHandler(&runs))
	}
	srv := fakeServe(t, r)
	c := fakeClient(t)
	for _, path := range []string{"/default/1", "/wait/2", "/failfast/3", "/ttl/4"} {
		if resp, body := do(t, c, fakeCtx(t), "POST", srv.URL+path); resp.StatusCode != 200 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, body)
		}
	}
	want := []call{
		{Key: fakeKey(t, "id", "1"), Policy: lifecycle.Policy{Route: "/default/{id}"}},
		{Key: fakeKey(t, "id", "2"), Policy: lifecycle.Policy{Wait: 2 * time.Second, TTL: 3 * time.Second, Route: "/wait/{id}"}},
		{Key: fakeKey(t, "id", "3"), Policy: lifecycle.Policy{Wait: lockcore.FailFast, Route: "/failfast/{id}"}},
		{Key: fakeKey(t, "id", "4"), Policy: lifecycle.Policy{TTL: 30 * time.Millisecond, Route: "/ttl/{id}"}},
	}
	got := e.Calls()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the engine was called with\n%+v\nwant\n%+v", got, want)
	}
}

// TestFakeStatuses: a missing or invalid key or token is a 400, a busy lock
// a 409 with Retry-After (the engine's first hint, 100 ms, rounded up to 1 s) both
// fail-fast and after a wait, an unreachable engine a 503, and a caller
// that goes away while waiting leaves nothing queued; the handler runs in
// none of these cases, and does once the lock is free.
func TestFakeStatuses(t *testing.T) {
	e := newFake()
	var runs atomic.Int32
	r := chi.NewRouter()
	r.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}})).Post("/ff/{productID}", okHandler(&runs))
	r.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Wait: 50 * time.Millisecond}})).Post("/wait/{productID}", okHandler(&runs))
	r.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Wait: time.Hour}})).Post("/long/{productID}", okHandler(&runs))
	r.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Header("X-User-ID")})).Post("/user", okHandler(&runs))
	srv := fakeServe(t, r)
	c := fakeClient(t)
	k := fakeKey(t, "productID", "42")

	for _, tc := range []struct {
		name string
		path string
		hdr  []string
	}{
		{"missing header", "/user", nil},
		{"empty header", "/user", []string{"X-User-ID", ""}},
		{"key too long", "/ff/" + strings.Repeat("x", keylimit.PartLen+1), nil},
		{"malformed token", "/user", []string{"X-User-ID", "u7", "Routelock-Token", "short"}},
	} {
		if resp, body := do(t, c, fakeCtx(t), "POST", srv.URL+tc.path, tc.hdr...); resp.StatusCode != 400 {
			t.Errorf("%s: %d %q, want 400", tc.name, resp.StatusCode, body)
		}
	}

	holder, err := e.Acquire(fakeCtx(t), k, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 2500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/ff/42", "/wait/42"} {
		resp, body := do(t, c, fakeCtx(t), "POST", srv.URL+path)
		if resp.StatusCode != 409 || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("%s while held: %d Retry-After %q %q, want 409 and 1", path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	if n := e.Waiters(k); n != 0 {
		t.Fatalf("%d waiters left after 409s", n)
	}

	// The caller goes away while waiting: nothing is left queued or held.
	ctx, cancel := context.WithCancel(fakeCtx(t))
	gone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/long/42", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	if err := e.Await(fakeCtx(t), func() bool { return e.Waiters(k) == 1 }); err != nil {
		t.Fatalf("the request never queued: %v", err)
	}
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	if err := e.Await(fakeCtx(t), func() bool { return e.Waiters(k) == 0 }); err != nil {
		t.Fatalf("the waiter of a caller that went away is still queued: %v", err)
	}
	if fence, _ := e.Held(k); fence != holder.Fence() {
		t.Fatalf("held with fence %d, want the holder's %d", fence, holder.Fence())
	}

	e.SetUnavailable(true)
	if resp, body := do(t, c, fakeCtx(t), "POST", srv.URL+"/ff/7"); resp.StatusCode != 503 {
		t.Errorf("engine down: %d %q, want 503", resp.StatusCode, body)
	}
	e.SetUnavailable(false)

	if n := runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for refused requests", n)
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, body := do(t, c, fakeCtx(t), "POST", srv.URL+"/ff/42")
	if resp.StatusCode != 200 || runs.Load() != 1 {
		t.Fatalf("free lock: %d %q, %d runs", resp.StatusCode, body, runs.Load())
	}
	if f := resp.Header.Get("X-Fence"); f != strconv.FormatInt(holder.Fence()+1, 10) {
		t.Fatalf("fence %s, want %d", f, holder.Fence()+1)
	}
	if _, entries := e.Held(k); entries != 0 {
		t.Fatal("the lock outlived its request")
	}
}

// outerHandler is a handler of the outer service: it calls the URL in its
// "inner" query parameter with c and the request's context (made
// cancellable, and its cancel sent on cancels if that is not nil), and
// answers with its own fencing token (X-Fence) and the inner response's
// status, fencing token, entries and Retry-After (X-Inner-…). With proceed
// not nil, it waits for proceed to close before it returns.
func outerHandler(c *http.Client, cancels chan<- context.CancelFunc, proceed <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f, _ := enginetest.Fence(r.Context())
		w.Header().Set("X-Fence", strconv.FormatInt(f, 10))
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		if cancels != nil {
			cancels <- cancel
		}
		req, err := http.NewRequestWithContext(ctx, "GET", r.URL.Query().Get("inner"), nil)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		resp, err := c.Do(req)
		if proceed != nil {
			// Hold on until the test saw the inner request leave the
			// queue: returning releases the lock, which would grant it to
			// the inner request if its server had not yet seen it go.
			select {
			case <-proceed:
			case <-time.After(fakeBound):
			}
		}
		if err != nil {
			w.Header().Set("X-Inner-Status", "error")
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		w.Header().Set("X-Inner-Status", strconv.Itoa(resp.StatusCode))
		w.Header().Set("X-Inner-Fence", resp.Header.Get("X-Fence"))
		w.Header().Set("X-Inner-Entries", resp.Header.Get("X-Entries"))
		w.Header().Set("X-Inner-Retry-After", resp.Header.Get("Retry-After"))
	}
}

// TestFakePropagation: a handler holding productID:42 calls a route of a
// second server on the same resource through middleware.Transport and
// re-enters its lock there (no deadlock, the same fencing token, one more
// entry of the same hold); a server whose TrustToken refuses the caller
// makes the inner call fail fast (409) or wait in the queue instead.
func TestFakePropagation(t *testing.T) {
	e := newFake()
	k := fakeKey(t, "productID", "42")
	var innerRuns atomic.Int32
	stock := func(w http.ResponseWriter, r *http.Request) {
		innerRuns.Add(1)
		f, _ := enginetest.Fence(r.Context())
		_, entries := e.Held(k)
		if r.Header.Get("Routelock-Token") != "" {
			http.Error(w, "token header reached the handler", 500)
			return
		}
		w.Header().Set("X-Fence", strconv.FormatInt(f, 10))
		w.Header().Set("X-Entries", strconv.Itoa(entries))
	}
	inner := chi.NewRouter()
	inner.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}})).Get("/products/{productID}/stock", stock)
	untrusting := middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}, TrustToken: func(*http.Request) bool { return false }}
	inner.With(middleware.Lock(e, untrusting)).Get("/untrusted/{productID}/stock", stock)
	untrusting.Policy.Wait = time.Hour
	inner.With(middleware.Lock(e, untrusting)).Get("/untrusted-wait/{productID}/stock", stock)
	in := fakeServe(t, inner)

	c := fakeClient(t)
	cancels := make(chan context.CancelFunc, 1)
	proceed := make(chan struct{})
	outer := chi.NewRouter()
	outer.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}})).Post("/products/{productID}/buy", outerHandler(c, nil, nil))
	outer.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}})).Post("/products/{productID}/buy-cancellable", outerHandler(c, cancels, proceed))
	out := fakeServe(t, outer)

	resp, body := do(t, c, fakeCtx(t), "POST", out.URL+"/products/42/buy?inner="+in.URL+"/products/42/stock")
	h := resp.Header
	if resp.StatusCode != 200 || h.Get("X-Inner-Status") != "200" {
		t.Fatalf("nested call: %d, inner %s; %q", resp.StatusCode, h.Get("X-Inner-Status"), body)
	}
	if h.Get("X-Fence") == "0" || h.Get("X-Inner-Fence") != h.Get("X-Fence") {
		t.Fatalf("outer fence %s, inner fence %s: want the same hold", h.Get("X-Fence"), h.Get("X-Inner-Fence"))
	}
	if h.Get("X-Inner-Entries") != "2" {
		t.Fatalf("the inner call saw %s entries, want 2 (re-entered by token)", h.Get("X-Inner-Entries"))
	}
	if _, entries := e.Held(k); entries != 0 {
		t.Fatal("the lock outlived the nested requests")
	}

	// TrustToken false, fail fast: the inner request is a stranger, 409.
	runs := innerRuns.Load()
	resp, body = do(t, c, fakeCtx(t), "POST", out.URL+"/products/42/buy?inner="+in.URL+"/untrusted/42/stock")
	if resp.StatusCode != 200 || resp.Header.Get("X-Inner-Status") != "409" || resp.Header.Get("X-Inner-Retry-After") == "" {
		t.Fatalf("untrusted nested call: %d, inner %s Retry-After %q; %q", resp.StatusCode,
			resp.Header.Get("X-Inner-Status"), resp.Header.Get("X-Inner-Retry-After"), body)
	}

	// TrustToken false, waiting: the inner request queues behind its own
	// caller; the caller gives up on it, and nothing is left behind.
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(fakeCtx(t), "POST", out.URL+"/products/42/buy-cancellable?inner="+in.URL+"/untrusted-wait/42/stock", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
			done <- nil
			return
		}
		resp.Body.Close()
		done <- resp
	}()
	cancelInner := <-cancels
	if err := e.Await(fakeCtx(t), func() bool { return e.Waiters(k) == 1 }); err != nil {
		t.Fatalf("the untrusted inner request did not queue: %v", err)
	}
	if _, entries := e.Held(k); entries != 1 {
		t.Fatalf("%d entries: the untrusted request entered", entries)
	}
	cancelInner()
	if err := e.Await(fakeCtx(t), func() bool { return e.Waiters(k) == 0 }); err != nil {
		t.Fatalf("the cancelled inner request is still queued: %v", err)
	}
	close(proceed)
	resp = <-done
	if resp == nil {
		t.FailNow()
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Inner-Status") != "error" {
		t.Fatalf("cancelled untrusted call: %d, inner %s", resp.StatusCode, resp.Header.Get("X-Inner-Status"))
	}
	if err := e.Await(fakeCtx(t), func() bool { _, n := e.Held(k); return n == 0 && e.Waiters(k) == 0 }); err != nil {
		t.Fatalf("left behind: %v", err)
	}
	if innerRuns.Load() != runs {
		t.Fatal("an untrusted inner request ran its handler")
	}
}

// TestFakeLeaseLost: a lease lost while the handler runs cancels the
// handler's context with a cause matching lockcore.ErrLockLost, and the
// next request takes the key with a greater fencing token.
func TestFakeLeaseLost(t *testing.T) {
	e := newFake()
	k := fakeKey(t, "id", "7")
	started := make(chan struct{})
	r := chi.NewRouter()
	r.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("id"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}})).Post("/work/{id}", func(w http.ResponseWriter, r *http.Request) {
		f, _ := enginetest.Fence(r.Context())
		w.Header().Set("X-Fence", strconv.FormatInt(f, 10))
		if r.URL.Query().Get("block") == "" {
			return
		}
		close(started)
		select {
		case <-r.Context().Done():
			w.Header().Set("X-Cause", fmt.Sprint(context.Cause(r.Context())))
			w.Header().Set("X-Lost", strconv.FormatBool(errors.Is(context.Cause(r.Context()), lockcore.ErrLockLost)))
			_, held := enginetest.Fence(r.Context())
			w.Header().Set("X-Still-Held", strconv.FormatBool(held))
		case <-time.After(fakeBound):
			w.Header().Set("X-Lost", "not cancelled")
		}
	})
	srv := fakeServe(t, r)
	c := fakeClient(t)

	got := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(fakeCtx(t), "POST", srv.URL+"/work/7?block=1", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		resp.Body.Close()
		got <- resp
	}()
	select {
	case <-started:
	case <-time.After(fakeBound):
		t.Fatal("the handler never started")
	}
	if !e.Lose(k) {
		t.Fatal("no hold to lose")
	}
	resp := <-got
	if resp == nil {
		t.FailNow()
	}
	if resp.Header.Get("X-Lost") != "true" || resp.Header.Get("X-Still-Held") != "false" {
		t.Fatalf("handler saw cause %q (lost: %s, still held: %s)", resp.Header.Get("X-Cause"), resp.Header.Get("X-Lost"), resp.Header.Get("X-Still-Held"))
	}
	next, body := do(t, c, fakeCtx(t), "POST", srv.URL+"/work/7")
	if next.StatusCode != 200 || fenceOf(next) <= fenceOf(resp) {
		t.Fatalf("after the loss: %d fence %s (lost one %s) %q", next.StatusCode, next.Header.Get("X-Fence"), resp.Header.Get("X-Fence"), body)
	}
}

// TestFakePanicReleases: a panicking handler releases the lock, the panic
// goes on up the chain (to a recovering middleware outside Lock), and the
// next request gets the lock.
func TestFakePanicReleases(t *testing.T) {
	e := newFake()
	k := fakeKey(t, "id", "9")
	recovered := make(chan any, 1)
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					_, entries := e.Held(k)
					recovered <- fmt.Sprintf("%v; entries %d", v, entries)
					http.Error(w, "recovered", 500)
				}
			}()
			next.ServeHTTP(w, r)
		})
	})
	var runs atomic.Int32
	r.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("id"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}})).Post("/boom/{id}", func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
	})
	srv := fakeServe(t, r)
	c := fakeClient(t)
	if resp, _ := do(t, c, fakeCtx(t), "POST", srv.URL+"/boom/9"); resp.StatusCode != 500 {
		t.Fatalf("panicking handler: %d", resp.StatusCode)
	}
	if v := <-recovered; v != "boom; entries 0" {
		t.Fatalf("recovered %q, want the panic with the lock released", v)
	}
	if resp, body := do(t, c, fakeCtx(t), "POST", srv.URL+"/boom/9"); resp.StatusCode != 200 {
		t.Fatalf("after the panic: %d %q", resp.StatusCode, body)
	}
}

// TestTokenHeaderNeverReachesHandler: whatever the Routelock-Token header
// holds (valid tokens, two field lines, a malformed value, too many
// tokens), a handler that runs, locked or passed through by a router-wide
// lock, never sees it: it is a secret of the request that minted it.
func TestTokenHeaderNeverReachesHandler(t *testing.T) {
	e := newFake()
	var leaked atomic.Int32
	h := func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Header["Routelock-Token"]; ok {
			leaked.Add(1)
		}
	}
	r := chi.NewRouter()
	r.Use(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID")}))
	r.Get("/health", h)
	r.Get("/products/{productID}", h)
	srv := fakeServe(t, r)
	ctx := fakeCtx(t)
	tok := lifecycle.NewToken()
	many := make([]string, 17) // one more than a list may hold
	for i := range many {
		many[i] = lifecycle.NewToken()
	}
	for _, vs := range [][]string{
		{tok},
		{tok, lifecycle.NewToken()},
		{"not a token"},
		{strings.Join(many, ",")},
	} {
		for _, path := range []string{"/health", "/products/42"} {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vs {
				req.Header.Add("Routelock-Token", v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			t.Logf("%s with %d header line(s): %d", path, len(vs), resp.StatusCode)
		}
	}
	if n := leaked.Load(); n != 0 {
		t.Fatalf("the token header reached the handler %d times", n)
	}
}
