package lockotel_test

// Telemetry of HTTP requests through chi and the middleware, on the
// in-memory engine, which tells the Telemetry its events as the Redis
// engine does: judged by what the client and the handler see, and by the
// spans and metrics recorded.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/middleware"
)

// entry is what a handler saw when it ran.
type entry struct {
	span trace.SpanContext // the current span of its context
	ctx  context.Context
}

// shopRig is a chi router on a Locker with telemetry, on the fake engine,
// served on loopback. Every route locks productID: /buy waits (5 s),
// /reserve fails fast, /quick waits 50 ms. A request with header X-Hold
// keeps its handler running until the test sends on proceed, or its
// context ends (then it answers 410 with the context's cause).
type shopRig struct {
	*rig
	fe      *fakeEngine
	locker  *lock.Locker
	srv     *httptest.Server
	c       *http.Client
	entered chan entry
	proceed chan struct{}
}

const quickWait = 50 * time.Millisecond

func newShop(t *testing.T, r *rig) *shopRig {
	s := &shopRig{rig: r, entered: make(chan entry, 16), proceed: make(chan struct{})}
	s.fe = &fakeEngine{Engine: &locktest.Engine{Events: r.tel.Events()}}
	s.locker = lock.FromEngine(s.fe, lock.Observe(r.tel))
	h := func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		s.entered <- entry{span: trace.SpanFromContext(ctx).SpanContext(), ctx: ctx}
		if req.Header.Get("X-Hold") != "" {
			select {
			case <-s.proceed:
			case <-ctx.Done():
				w.WriteHeader(http.StatusGone)
				fmt.Fprint(w, context.Cause(ctx))
				return
			}
		}
		fmt.Fprint(w, "ok")
	}
	router := chi.NewRouter()
	router.Use(r.traced)
	router.With(s.locker.ByParam("productID")).Post("/products/{productID}/buy", h)
	router.With(s.locker.ByParam("productID", lock.FailFast())).Post("/products/{productID}/reserve", h)
	router.With(s.locker.ByParam("productID", lock.Wait(quickWait))).Post("/products/{productID}/quick", h)
	s.srv = serve(t, router)
	s.c = client(t, nil)
	return s
}

// enter returns what the next handler to run saw.
func (s *shopRig) enter(t *testing.T) entry {
	t.Helper()
	select {
	case e := <-s.entered:
		return e
	case <-time.After(bound):
		t.Fatal("no handler ran")
		return entry{}
	}
}

// hold sends a request on /products/{id}/buy whose handler keeps running
// until the test sends on proceed; it returns what the handler saw, once
// it runs, and a channel that receives the response's status.
func (s *shopRig) hold(t *testing.T, id string) (entry, <-chan int) {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		code, _ := post(s.c, bounded(t), s.srv.URL+"/products/"+id+"/buy", "X-Hold", "1")
		done <- code
	}()
	return s.enter(t), done
}

// awaitWaiters waits until n acquisitions wait for productID:id.
func (s *shopRig) awaitWaiters(t *testing.T, id string, n int) {
	t.Helper()
	k := mustKey(t, "productID", id)
	if err := s.fe.Await(bounded(t), func() bool { return s.fe.Waiters(k) == n }); err != nil {
		t.Fatalf("waiting for %d waiters: %v", n, err)
	}
}

func wantStatus(t *testing.T, got <-chan int, want int) {
	t.Helper()
	select {
	case code := <-got:
		if code != want {
			t.Fatalf("status %d, want %d", code, want)
		}
	case <-time.After(bound):
		t.Fatal("no response")
	}
}

// TestHTTPUncontended: one request takes a free lock. Its span gets a
// child lock.acquire (acquired, with the route's template, the mode, the
// fencing token, the event lock.granted) and a child lock.release; the
// handler's context keeps the request's span as its current span; the
// metrics count one acquisition and one hold, no longer held.
func TestHTTPUncontended(t *testing.T) {
	s := newShop(t, newRig(t))
	if code, body := post(s.c, bounded(t), s.srv.URL+"/products/42/buy"); code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	e := s.enter(t)
	req := s.wait(t)
	if !e.span.Equal(req) {
		t.Fatalf("the handler's current span is %v, not the request's %v", e.span.SpanID(), req.SpanID())
	}
	acq := s.only(t, "lock.acquire", req)
	wantAttrs(t, "lock.acquire", acq.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": "/products/{productID}/buy", "lock.mode": "wait",
		"lock.outcome": "acquired", "lock.wait": nil, "lock.reentered": false, "lock.fence": int64(1),
	})
	if ev := events(acq); len(ev) != 1 || ev[0] != "lock.granted" {
		t.Fatalf("lock.acquire events %q, want lock.granted", ev)
	}
	if acq.Status().Code != codes.Unset {
		t.Fatalf("lock.acquire status %v", acq.Status())
	}
	rel := s.only(t, "lock.release", req)
	wantAttrs(t, "lock.release", rel.Attributes(), map[string]any{"lock.resource": "productID", "lock.outcome": "released", "lock.held": nil})
	if rel.StartTime().Before(acq.EndTime()) || rel.EndTime().Before(rel.StartTime()) {
		t.Fatalf("lock.release runs %v–%v, lock.acquire ended %v", rel.StartTime(), rel.EndTime(), acq.EndTime())
	}

	m := s.collect(t)
	m.wantCount(t, "routelock.acquire.duration", 1, "lock.resource", "productID", "lock.route", "/products/{productID}/buy", "lock.outcome", "acquired")
	m.wantCount(t, "routelock.hold.duration", 1, "lock.resource", "productID")
	m.wantSum(t, "routelock.held", 0, "lock.resource", "productID")
	if _, ok := m["routelock.lost"]; ok {
		t.Fatalf("routelock.lost recorded: %s", m.points("routelock.lost"))
	}
}

// TestHTTPContended: a request that finds the lock held waits (counted in
// routelock.waiting while it does), is woken by the release (a message)
// and acquires it; its lock.acquire says how long it waited.
func TestHTTPContended(t *testing.T) {
	s := newShop(t, newRig(t))
	a, aDone := s.hold(t, "42")
	bDone := make(chan int, 1)
	go func() {
		code, _ := post(s.c, bounded(t), s.srv.URL+"/products/42/buy")
		bDone <- code
	}()
	s.awaitWaiters(t, "42", 1)
	m := s.collect(t)
	m.wantSum(t, "routelock.waiting", 1, "lock.resource", "productID")
	m.wantSum(t, "routelock.held", 1, "lock.resource", "productID")

	s.proceed <- struct{}{}
	wantStatus(t, aDone, http.StatusOK)
	b := s.enter(t)
	wantStatus(t, bDone, http.StatusOK)
	s.wait(t)
	s.wait(t)

	acq := s.only(t, "lock.acquire", b.span)
	wantAttrs(t, "lock.acquire", acq.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": "/products/{productID}/buy", "lock.mode": "wait",
		"lock.outcome": "acquired", "lock.wait": nil, "lock.reentered": false, "lock.fence": int64(2),
	})
	aAcq := s.only(t, "lock.acquire", a.span)
	s.only(t, "lock.release", a.span)
	if w := attrs(acq.Attributes())["lock.wait"].AsFloat64(); w <= attrs(aAcq.Attributes())["lock.wait"].AsFloat64() || w <= 0 {
		t.Fatalf("lock.wait of the waiter %v s", w)
	}
	m = s.collect(t)
	m.wantCount(t, "routelock.acquire.duration", 2, "lock.resource", "productID", "lock.route", "/products/{productID}/buy", "lock.outcome", "acquired")
	m.wantSum(t, "routelock.waiting", 0, "lock.resource", "productID")
	m.wantSum(t, "routelock.wakeups", 1, "lock.resource", "productID", "lock.source", "message")
	m.wantSum(t, "routelock.held", 0, "lock.resource", "productID")
	m.wantCount(t, "routelock.hold.duration", 2, "lock.resource", "productID")
}

// TestHTTPFailFastBusy: a fail-fast request that finds the lock held is
// answered 409 without running its handler; its lock.acquire says busy,
// fail_fast, without an error status.
func TestHTTPFailFastBusy(t *testing.T) {
	s := newShop(t, newRig(t))
	_, aDone := s.hold(t, "42")
	if code, _ := post(s.c, bounded(t), s.srv.URL+"/products/42/reserve"); code != http.StatusConflict {
		t.Fatalf("status %d, want 409", code)
	}
	req := s.wait(t)
	acq := s.only(t, "lock.acquire", req)
	wantAttrs(t, "lock.acquire", acq.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": "/products/{productID}/reserve", "lock.mode": "fail_fast",
		"lock.outcome": "busy", "lock.wait": nil,
	})
	if ev := events(acq); len(ev) != 0 || acq.Status().Code != codes.Unset {
		t.Fatalf("a busy lock.acquire has events %q and status %v", ev, acq.Status())
	}
	if n := len(s.spans("lock.release")); n != 0 {
		t.Fatalf("%d lock.release spans while the holder runs", n)
	}
	s.collect(t).wantCount(t, "routelock.acquire.duration", 1, "lock.resource", "productID", "lock.route", "/products/{productID}/reserve", "lock.outcome", "busy")
	s.proceed <- struct{}{}
	wantStatus(t, aDone, http.StatusOK)
}

// TestHTTPWaitTimeout: a request whose wait runs out is answered 409; its
// lock.acquire says wait_timeout after at least the wait, and its waiter
// was woken by its timer.
func TestHTTPWaitTimeout(t *testing.T) {
	s := newShop(t, newRig(t))
	_, aDone := s.hold(t, "42")
	if code, _ := post(s.c, bounded(t), s.srv.URL+"/products/42/quick"); code != http.StatusConflict {
		t.Fatalf("status %d, want 409", code)
	}
	acq := s.only(t, "lock.acquire", s.wait(t))
	wantAttrs(t, "lock.acquire", acq.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": "/products/{productID}/quick", "lock.mode": "wait",
		"lock.outcome": "wait_timeout", "lock.wait": nil,
	})
	if w := attrs(acq.Attributes())["lock.wait"].AsFloat64(); w < quickWait.Seconds() {
		t.Fatalf("lock.wait %v s, below the wait of %v", w, quickWait)
	}
	m := s.collect(t)
	m.wantCount(t, "routelock.acquire.duration", 1, "lock.resource", "productID", "lock.route", "/products/{productID}/quick", "lock.outcome", "wait_timeout")
	m.wantSum(t, "routelock.wakeups", 1, "lock.resource", "productID", "lock.source", "timer")
	m.wantSum(t, "routelock.waiting", 0, "lock.resource", "productID")
	s.proceed <- struct{}{}
	wantStatus(t, aDone, http.StatusOK)
}

// TestHTTPCancelled: a client that goes away while its request waits ends
// the wait; the request's lock.acquire says cancelled, and nothing waits
// any more.
func TestHTTPCancelled(t *testing.T) {
	s := newShop(t, newRig(t))
	_, aDone := s.hold(t, "42")
	ctx, cancel := context.WithCancel(bounded(t))
	bDone := make(chan string, 1)
	go func() {
		_, body := post(s.c, ctx, s.srv.URL+"/products/42/buy")
		bDone <- body
	}()
	s.awaitWaiters(t, "42", 1)
	cancel()
	if body := <-bDone; !strings.Contains(body, "context canceled") {
		t.Fatalf("the cancelled client got %q", body)
	}
	acq := s.only(t, "lock.acquire", s.wait(t))
	wantAttrs(t, "lock.acquire", acq.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": "/products/{productID}/buy", "lock.mode": "wait",
		"lock.outcome": "cancelled", "lock.wait": nil,
	})
	m := s.collect(t)
	m.wantCount(t, "routelock.acquire.duration", 1, "lock.resource", "productID", "lock.route", "/products/{productID}/buy", "lock.outcome", "cancelled")
	m.wantSum(t, "routelock.waiting", 0, "lock.resource", "productID")
	s.proceed <- struct{}{}
	wantStatus(t, aDone, http.StatusOK)
}

// TestHTTPUnavailable: a request while the engine is down is answered 503;
// its lock.acquire says unavailable, with an error status that names the
// outcome and nothing else.
func TestHTTPUnavailable(t *testing.T) {
	s := newShop(t, newRig(t))
	s.fe.SetUnavailable(true)
	if code, _ := post(s.c, bounded(t), s.srv.URL+"/products/42/buy"); code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", code)
	}
	acq := s.only(t, "lock.acquire", s.wait(t))
	wantAttrs(t, "lock.acquire", acq.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": "/products/{productID}/buy", "lock.mode": "wait",
		"lock.outcome": "unavailable", "lock.wait": nil,
	})
	if st := acq.Status(); st.Code != codes.Error || st.Description != "unavailable" {
		t.Fatalf("status %+v, want Error unavailable", st)
	}
	s.collect(t).wantCount(t, "routelock.acquire.duration", 1, "lock.resource", "productID", "lock.route", "/products/{productID}/buy", "lock.outcome", "unavailable")
}

// TestHTTPLost: a hold revoked while its handler runs cancels the
// handler's context with the cause; the request's span gets lock.revoked,
// routelock.lost counts it by reason, and the hold is no longer counted as
// held, with no lock.release span. (A hold lost otherwise, to expiry, is
// TestRedisLeaseLost's: the in-memory engine's holds do not expire.)
func TestHTTPLost(t *testing.T) {
	for _, tc := range []struct {
		name, event, reason string
		cause               error
	}{
		{"revoked", "lock.revoked", "revoked", lockcore.ErrRevoked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newShop(t, newRig(t))
			a, aDone := s.hold(t, "42")
			if _, err := s.fe.Revoke(bounded(t), mustKey(t, "productID", "42"), "by an operator"); err != nil {
				t.Fatal(err)
			}
			wantStatus(t, aDone, http.StatusGone)
			<-a.ctx.Done()
			if cause := context.Cause(a.ctx); !errors.Is(cause, lockcore.ErrLockLost) || !errors.Is(cause, tc.cause) {
				t.Fatalf("the handler's context ended with %v", cause)
			}
			s.wait(t)
			var req sdkSpan
			for _, sp := range s.spans("request") {
				if sp.SpanContext().Equal(a.span) {
					req = sp
				}
			}
			if req == nil {
				t.Fatal("no request span")
			}
			if ev := req.Events(); len(ev) != 1 || ev[0].Name != tc.event {
				t.Fatalf("request span events %v, want %s", ev, tc.event)
			} else {
				wantAttrs(t, tc.event, ev[0].Attributes, map[string]any{"lock.resource": "productID", "lock.reason": tc.reason})
			}
			if n := len(s.spans("lock.release")); n != 0 {
				t.Fatalf("%d lock.release spans for a lost hold", n)
			}
			m := s.collect(t)
			m.wantSum(t, "routelock.lost", 1, "lock.resource", "productID", "lock.reason", tc.reason)
			m.wantSum(t, "routelock.held", 0, "lock.resource", "productID")
			m.wantCount(t, "routelock.hold.duration", 1, "lock.resource", "productID")
		})
	}
}

// TestHTTPReentered: a request that locks its resource twice (a router's
// r.Use and the route's r.With) re-enters the outer hold: two lock.acquire
// spans, the inner reentered with the same fencing token, one release, and
// routelock.held counts the hold once.
func TestHTTPReentered(t *testing.T) {
	r := newRig(t)
	fe := &locktest.Engine{Events: r.tel.Events()}
	locker := lock.FromEngine(fe, lock.Observe(r.tel))
	held := make(chan int64, 1)
	router := chi.NewRouter()
	router.Use(r.traced, locker.ByParam("productID"))
	router.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, req *http.Request) {
		m := r.collect(t)
		v, _ := m.sum(t, "routelock.held", "lock.resource", "productID")
		held <- v
	})
	srv := serve(t, router)
	if code, body := post(client(t, nil), bounded(t), srv.URL+"/products/7/buy"); code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	req := r.wait(t)
	if v := <-held; v != 1 {
		t.Fatalf("routelock.held while the handler ran: %d, want 1", v)
	}
	var acqs []sdkSpan
	for _, sp := range r.spans("lock.acquire") {
		if sp.Parent().SpanID() == req.SpanID() {
			acqs = append(acqs, sp)
		}
	}
	if len(acqs) != 2 {
		t.Fatalf("%d lock.acquire spans, want 2:%s", len(acqs), dump(r.sr.Ended()))
	}
	for i, want := range []bool{false, true} { // the outer one ends first
		a := attrs(acqs[i].Attributes())
		if a["lock.reentered"].AsBool() != want || a["lock.fence"].AsInt64() != 1 || a["lock.route"].AsString() != "/products/{productID}/buy" {
			t.Fatalf("lock.acquire %d: %v", i, acqs[i].Attributes())
		}
	}
	r.only(t, "lock.release", req)
	m := r.collect(t)
	m.wantSum(t, "routelock.held", 0, "lock.resource", "productID")
	m.wantCount(t, "routelock.hold.duration", 1, "lock.resource", "productID")
	m.wantCount(t, "routelock.acquire.duration", 2, "lock.resource", "productID", "lock.route", "/products/{productID}/buy", "lock.outcome", "acquired")
}

// TestHTTPRouteThroughLocker: a Locker is a lifecycle.Locker to give to
// middleware.Lock "to lock with its engine and Defaults" (lock.Locker), as
// the README's Configuration does for a router-wide lock on writes only.
// Through a Locker with lock.Observe, that route's lock.acquire carries
// lock.route, the route template, as a route of locker.ByParam does, and
// its metrics are counted by route.
func TestHTTPRouteThroughLocker(t *testing.T) {
	r := newRig(t)
	fe := &locktest.Engine{Events: r.tel.Events()}
	locker := lock.FromEngine(fe, lock.Observe(r.tel))
	router := chi.NewRouter()
	router.Use(r.traced)
	router.Use(middleware.Lock(locker, middleware.Config{
		Key:     keyfunc.Param("productID"),
		Methods: []string{"POST", "PUT", "PATCH", "DELETE"},
	}))
	router.Post("/products/{productID}/buy", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	srv := serve(t, router)
	if code, body := post(client(t, nil), bounded(t), srv.URL+"/products/42/buy"); code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	acq := r.only(t, "lock.acquire", r.wait(t))
	wantAttrs(t, "lock.acquire", acq.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": "/products/{productID}/buy", "lock.mode": "wait",
		"lock.outcome": "acquired", "lock.wait": nil, "lock.reentered": false, "lock.fence": int64(1),
	})
	r.collect(t).wantCount(t, "routelock.acquire.duration", 1, "lock.resource", "productID", "lock.route", "/products/{productID}/buy", "lock.outcome", "acquired")
}

// TestHTTPModeOverLockerDefaults: when the Locker's Defaults fail fast, a
// route that sets no wait fails fast, and its lock.acquire says so:
// lock.mode fail_fast beside outcome busy, not wait, which would claim a
// wait that never happened.
func TestHTTPModeOverLockerDefaults(t *testing.T) {
	r := newRig(t)
	fe := &locktest.Engine{Events: r.tel.Events()}
	outer := lock.FromEngine(fe, lock.Defaults(lock.FailFast()), lock.Observe(r.tel))
	router := chi.NewRouter()
	router.Use(r.traced)
	router.With(outer.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	srv := serve(t, router)
	held, err := lifecycle.Serve(fe, nil).Acquire(bounded(t), mustKey(t, "productID", "42"), lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	if code, body := post(client(t, nil), bounded(t), srv.URL+"/products/42/buy"); code != http.StatusConflict {
		t.Fatalf("status %d: %s, want 409", code, body)
	}
	acq := r.only(t, "lock.acquire", r.wait(t))
	wantAttrs(t, "lock.acquire", acq.Attributes(), map[string]any{
		"lock.resource": "productID", "lock.route": "/products/{productID}/buy", "lock.mode": "fail_fast",
		"lock.outcome": "busy", "lock.wait": nil,
	})
}
