package lock_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// instrumented is an engine wrapped by value, as a program wraps one to
// count its calls: a value of a comparable type whose engine may be one
// that cannot be compared.
type instrumented struct{ lockcore.Engine }

// TestUncomparableEngineSegmentUnderAnotherLock: a Locker on an engine
// value that cannot be compared serves a segmented route whose request
// holds another lock already (a user's), as any other Locker.
func TestUncomparableEngineSegmentUnderAnotherLock(t *testing.T) {
	locker := lock.FromEngine(labelled{Engine: new(locktest.Engine), labels: []string{"shop"}})
	var ran atomic.Int64
	r := chi.NewRouter()
	r.Use(chimw.Recoverer)
	r.With(locker.ByParam("userID"), locker.ByParam("productID", lock.Segments(4))).
		Post("/users/{userID}/products/{productID}/buy", func(_ http.ResponseWriter, r *http.Request) {
			if _, ok := lock.Slot(r.Context()); !ok {
				t.Errorf("the handler holds no segment: %v", lock.Keys(r.Context()))
			}
			ran.Add(1)
		})
	srv := httptest.NewServer(r)
	defer srv.Close()
	if res := do(t, httpClient(t, nil), "POST", srv.URL+"/users/u1/products/42/buy", nil); res.status != http.StatusOK || ran.Load() != 1 {
		t.Fatalf("%d %q, handler ran %d times; want 200, once", res.status, res.body, ran.Load())
	}
}

// TestTwoLockersOnWrappedUncomparableEngine: two Lockers given one engine
// value whose type compares but whose engine cannot be compared: a nested
// acquisition through the second, of the key the first holds for the
// request, is granted (by the request's owner token, if not in memory).
func TestTwoLockersOnWrappedUncomparableEngine(t *testing.T) {
	e := instrumented{labelled{Engine: new(locktest.Engine), labels: []string{"shop"}}}
	a, b := lock.FromEngine(e), lock.FromEngine(e)
	var ran atomic.Int64
	r := chi.NewRouter()
	r.Use(chimw.Recoverer)
	r.With(a.ByParam("productID")).Post("/products/{productID}/buy", func(_ http.ResponseWriter, r *http.Request) {
		k, _ := lockcore.NewKey("productID", "42")
		in, err := b.Acquire(r.Context(), k, lock.FailFast())
		if err != nil || !in.Reentered() {
			t.Errorf("nested acquisition through the second Locker: %v, want a re-entry", err)
			return
		}
		_ = in.Release(r.Context())
		ran.Add(1)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	if res := do(t, httpClient(t, nil), "POST", srv.URL+"/products/42/buy", nil); res.status != http.StatusOK || ran.Load() != 1 {
		t.Fatalf("%d %q, handler ran %d times; want 200, once", res.status, res.body, ran.Load())
	}
}

// TestNestedSegmentThroughLoggedLocker: on an engine without gates, a
// Locker with a Logger (whose routes acquire through the Locker itself,
// not its engine's Core) serves a segmented route whose handler asks for
// the same resource's segment again: it re-enters the request's segment
// in memory rather than taking a second one.
func TestNestedSegmentThroughLoggedLocker(t *testing.T) {
	locker := lock.FromEngine(instrumented{new(locktest.Engine)}, lock.Logger(slog.New(slog.DiscardHandler)))
	var ran atomic.Int64
	r := chi.NewRouter()
	r.With(locker.ByParam("productID", lock.Segments(4), lock.FailFast())).Post("/products/{productID}/buy", func(_ http.ResponseWriter, r *http.Request) {
		k, _ := lockcore.NewKey("productID", "42")
		outer := lock.Keys(r.Context())
		in, err := lifecycle.AcquireSegment(r.Context(), locker, k, lifecycle.Policy{Segments: 4, Wait: lockcore.FailFast})
		if err != nil {
			t.Errorf("nested segment: %v", err)
			return
		}
		defer func() { _ = in.Release(r.Context()) }()
		if len(outer) != 1 || in.Key().String() != outer[0] || !in.ReenteredInMemory() {
			t.Errorf("nested segment %s (re-entered in memory: %v) under %v, want the request's own", in.Key(), in.ReenteredInMemory(), outer)
			return
		}
		ran.Add(1)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	if res := do(t, httpClient(t, nil), "POST", srv.URL+"/products/42/buy", nil); res.status != http.StatusOK || ran.Load() != 1 {
		t.Fatalf("%d %q, handler ran %d times; want 200, once", res.status, res.body, ran.Load())
	}
}
