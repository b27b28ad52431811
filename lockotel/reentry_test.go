package lockotel_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/middleware"
)

// TestRedisReenteredAcrossProcesses: two Lockers on one Redis, two
// processes with telemetry of their own. A request to the first locks
// productID:42 and calls the second through middleware.Transport, whose
// route locks productID:42 too: the nested call re-enters the hold by its
// propagated owner token, and its lock.acquire says so (lock.reentered
// true, the outer fencing token), while each process counts a hold of its
// own in routelock.held, back to 0 once both are released.
func TestRedisReenteredAcrossProcesses(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		outerTel, innerTel := newRig(t), newRig(t)
		outer := observed(t, b.Universal(t), prefix, outerTel.tel, lock.Defaults(lock.FailFast()))
		inner := observed(t, b.Universal(t), prefix, innerTel.tel, lock.Defaults(lock.FailFast()))

		innerFence := make(chan int64, 1)
		innerRouter := chi.NewRouter()
		innerRouter.Use(innerTel.traced)
		innerRouter.With(inner.ByParam("productID")).Post("/products/{productID}/reserve", func(w http.ResponseWriter, req *http.Request) {
			f, _ := lock.FencingToken(req.Context())
			innerFence <- f
			fmt.Fprint(w, "reserved")
		})
		innerURL := serve(t, innerRouter).URL

		hc := client(t, middleware.Transport)
		outerFence := make(chan int64, 1)
		outerRouter := chi.NewRouter()
		outerRouter.Use(outerTel.traced)
		outerRouter.With(outer.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, req *http.Request) {
			f, _ := lock.FencingToken(req.Context())
			outerFence <- f
			code, body := post(hc, req.Context(), innerURL+"/products/"+chi.URLParam(req, "productID")+"/reserve")
			w.WriteHeader(code)
			fmt.Fprint(w, body)
		})
		outerURL := serve(t, outerRouter).URL

		if code, body := post(client(t, nil), bounded(t), outerURL+"/products/42/buy"); code != http.StatusOK {
			t.Fatalf("status %d: %s", code, body)
		}
		of, inf := <-outerFence, <-innerFence
		if of <= 0 || inf != of {
			t.Fatalf("fencing tokens: outer %d, inner %d; want the same", of, inf)
		}
		outerReq, innerReq := outerTel.wait(t), innerTel.wait(t)
		wantAttrs(t, "outer lock.acquire", outerTel.only(t, "lock.acquire", outerReq).Attributes(), map[string]any{
			"lock.resource": "productID", "lock.route": "/products/{productID}/buy", "lock.mode": "fail_fast",
			"lock.outcome": "acquired", "lock.wait": nil, "lock.reentered": false, "lock.fence": of,
		})
		wantAttrs(t, "inner lock.acquire", innerTel.only(t, "lock.acquire", innerReq).Attributes(), map[string]any{
			"lock.resource": "productID", "lock.route": "/products/{productID}/reserve", "lock.mode": "fail_fast",
			"lock.outcome": "acquired", "lock.wait": nil, "lock.reentered": true, "lock.fence": of,
		})
		// Each process's hold is its own, with its own release.
		innerTel.only(t, "lock.release", innerReq)
		outerTel.only(t, "lock.release", outerReq)
		for _, r := range []*rig{outerTel, innerTel} {
			m := r.collect(t)
			m.wantCount(t, "routelock.hold.duration", 1, "lock.resource", "productID")
			m.wantSum(t, "routelock.held", 0, "lock.resource", "productID")
		}
		// The lock is free again.
		ls, err := outer.Acquire(bounded(t), mustKey(t, "productID", "42"), lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatalf("after both released: %v", err)
		}
		_ = ls.Release(bounded(t))
	})
}
