package lockotel_test

// Telemetry of the Redis engine of lock.New, from the engine's Events:
// releases, a lease lost behind its holder, a hold force-released by an
// operator.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// redisShop serves POST /products/{productID}/buy behind r.traced and a
// lock of locker; the handler reports what it saw on entered and runs until
// its context ends, then at once answers 410 with the context's cause. The
// event of a loss lands on the request's span all the same: the middleware
// releases the lock before the span ends, and the engine's release returns
// only once it has told its Events of the loss.
func redisShop(t *testing.T, r *rig, locker *lock.Locker) (url string, entered chan entry) {
	entered = make(chan entry, 4)
	router := chi.NewRouter()
	router.Use(r.traced)
	router.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		entered <- entry{span: trace.SpanFromContext(ctx).SpanContext(), ctx: ctx}
		select {
		case <-ctx.Done():
		case <-time.After(bound):
		}
		w.WriteHeader(http.StatusGone)
		fmt.Fprint(w, context.Cause(ctx))
	})
	return serve(t, router).URL, entered
}

// TestRedisRevoked: an operator force-releases the hold of a running
// request (Locker.Operator().Revoke): the handler's context is cancelled
// with ErrRevoked, the request's span gets lock.revoked, and routelock.lost
// counts it with reason revoked.
func TestRedisRevoked(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		r := newRig(t)
		prefix := redistest.Prefix(t)
		locker := observed(t, b.Universal(t), prefix, r.tel)
		op := locker.Operator()
		if op == nil {
			t.Fatal("the Redis engine is no lockcore.Operator")
		}
		url, entered := redisShop(t, r, locker)

		done := make(chan int, 1)
		go func() {
			code, _ := post(client(t, nil), bounded(t), url+"/products/42/buy")
			done <- code
		}()
		var e entry
		select {
		case e = <-entered:
		case <-time.After(bound):
			t.Fatal("the handler did not run")
		}
		if _, err := op.Revoke(bounded(t), mustKey(t, "productID", "42"), "a test"); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, done, http.StatusGone)
		if cause := context.Cause(e.ctx); !errors.Is(cause, lockcore.ErrRevoked) {
			t.Fatalf("the handler's context ended with %v, want ErrRevoked", cause)
		}
		r.wait(t)
		var req sdkSpan
		for _, sp := range r.spans("request") {
			if sp.SpanContext().Equal(e.span) {
				req = sp
			}
		}
		if req == nil {
			t.Fatal("no request span")
		}
		if ev := req.Events(); len(ev) != 1 || ev[0].Name != "lock.revoked" {
			t.Fatalf("request span events %v, want lock.revoked", ev)
		} else {
			wantAttrs(t, "lock.revoked", ev[0].Attributes, map[string]any{"lock.resource": "productID", "lock.reason": "revoked"})
		}
		m := r.collect(t)
		m.wantSum(t, "routelock.lost", 1, "lock.resource", "productID", "lock.reason", "revoked")
		m.wantSum(t, "routelock.held", 0, "lock.resource", "productID")
	})
}

// TestRedisUncontended: on the Redis engine of lock.New, a request that
// takes a free lock gets its lock.acquire and, from the engine's Events,
// its lock.release under its span; the hold is counted and uncounted.
func TestRedisUncontended(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		r := newRig(t)
		locker := observed(t, b.Universal(t), redistest.Prefix(t), r.tel)
		router := chi.NewRouter()
		router.Use(r.traced)
		router.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, req *http.Request) {
			fmt.Fprint(w, "ok")
		})
		srv := serve(t, router)
		if code, body := post(client(t, nil), bounded(t), srv.URL+"/products/42/buy"); code != http.StatusOK {
			t.Fatalf("status %d: %s", code, body)
		}
		req := r.wait(t)
		wantAttrs(t, "lock.acquire", r.only(t, "lock.acquire", req).Attributes(), map[string]any{
			"lock.resource": "productID", "lock.route": "/products/{productID}/buy", "lock.mode": "wait",
			"lock.outcome": "acquired", "lock.wait": nil, "lock.reentered": false, "lock.fence": nil,
		})
		wantAttrs(t, "lock.release", r.only(t, "lock.release", req).Attributes(),
			map[string]any{"lock.resource": "productID", "lock.outcome": "released", "lock.held": nil})
		m := r.collect(t)
		m.wantCount(t, "routelock.acquire.duration", 1, "lock.resource", "productID", "lock.route", "/products/{productID}/buy", "lock.outcome", "acquired")
		m.wantCount(t, "routelock.hold.duration", 1, "lock.resource", "productID")
		m.wantSum(t, "routelock.held", 0, "lock.resource", "productID")
	})
}

// observed returns a Locker on a Redis engine of its own under prefix,
// which tells tel its events, watched by tel: what lock.New with
// lock.Observe(tel) makes, with a key prefix of the test's.
func observed(t *testing.T, rdb redis.UniversalClient, prefix string, tel lifecycle.Observer, opts ...lock.Option) *lock.Locker {
	t.Helper()
	e, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix, Events: tel.Events()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return lock.FromEngine(e, append(opts, lock.Observe(tel))...)
}
