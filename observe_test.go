package lock_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/lockcore/redisengine"
)

// watcher is an Observer that counts what it sees: acquisitions it was
// called around, holds its Events were told ended; and, with order set,
// notes its name there each time it is called, before the acquisition.
type watcher struct {
	mu       sync.Mutex
	acquired int
	ended    int
	name     string
	order    *[]string
}

func (w *watcher) Observe(ctx context.Context, keys []lockcore.Key, p lifecycle.Policy, acquire func(context.Context, lifecycle.Policy) ([]*lifecycle.Lease, error)) ([]*lifecycle.Lease, error) {
	w.mu.Lock()
	w.acquired++
	if w.order != nil {
		*w.order = append(*w.order, w.name)
	}
	w.mu.Unlock()
	return acquire(ctx, p)
}

func (w *watcher) Events() lockcore.Events { return w }

func (w *watcher) Waiting(lockcore.Key, int)   {}
func (w *watcher) Woken(lockcore.Key, string)  {}
func (w *watcher) Renewed(lockcore.Key, error) {}
func (w *watcher) Ended(context.Context, lockcore.Key, time.Duration, time.Duration, error, error) {
	w.mu.Lock()
	w.ended++
	w.mu.Unlock()
}

func (w *watcher) counts() (acquired, ended int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acquired, w.ended
}

// checkable is the in-memory engine with a Check method.
type checkable struct {
	*locktest.Engine
	err error
}

func (c *checkable) Check(context.Context) error { return c.err }

// TestObserveFromEngine: observers given to FromEngine are called around
// each acquisition in the order given, the last outermost, and the
// Locker's Check and Operator are its engine's: observers wrap nothing.
func TestObserveFromEngine(t *testing.T) {
	var order []string
	a, b := &watcher{name: "a", order: &order}, &watcher{name: "b", order: &order}
	want := errors.New("not set up")
	base := &checkable{Engine: new(locktest.Engine), err: want}
	l := lock.FromEngine(base, lock.Observe(a), lock.Observe(b))
	k, err := lockcore.NewKey("productID", "42")
	if err != nil {
		t.Fatal(err)
	}
	ls, err := l.Acquire(context.Background(), k, lock.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(context.Background())
	if !slices.Equal(order, []string{"b", "a"}) {
		t.Fatalf("observers called in the order %v, want [b a]: the last given outermost", order)
	}
	if err := l.Check(context.Background()); err != want {
		t.Fatalf("Check = %v, want the engine's", err)
	}
	if l.Operator() != lockcore.Operator(base) {
		t.Fatalf("Operator = %v, want the engine's", l.Operator())
	}

	defer func() {
		if recover() == nil {
			t.Fatal("Observe(nil) did not panic")
		}
	}()
	lock.Observe(nil)
}

// TestObserveNew: the Redis engine that New makes tells each observer's
// Events of its holds, and each observer is called around each
// acquisition, once however often it was given.
func TestObserveNew(t *testing.T) {
	a, b := new(watcher), new(watcher)
	l := lock.NewRedis(redistest.Mini(t).Client(t), redisengine.Options{Prefix: redistest.Prefix(t)},
		lock.Observe(a), lock.Observe(b), lock.Observe(a))
	defer l.Close()
	k, err := lockcore.NewKey("productID", "42")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ls, err := l.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if acq, ended := a.counts(); acq != 1 || ended != 1 {
		t.Errorf("observer given twice: called around %d acquisitions, %d holds ended, want 1 and 1", acq, ended)
	}
	if acq, ended := b.counts(); acq != 1 || ended != 1 {
		t.Errorf("observer given once: %d acquisitions, %d holds ended, want 1 and 1", acq, ended)
	}
}

// retuner is an Observer that changes the Policy it passes on: a TTL
// of its own, and a trace id.
type retuner struct{ ttl time.Duration }

func (o retuner) Observe(ctx context.Context, keys []lockcore.Key, p lifecycle.Policy, acquire func(context.Context, lifecycle.Policy) ([]*lifecycle.Lease, error)) ([]*lifecycle.Lease, error) {
	p.TTL, p.Trace = o.ttl, "4bf92f3577b34da6a3ce929d0e0e4736"
	return acquire(ctx, p)
}

func (retuner) Events() lockcore.Events { return nil }

// TestObserverChangesPreparedPolicy: a route's Policy is checked once,
// where the route is built, and not again per request; but an Observer
// that changes more than its labels has it checked afresh: a TTL below
// the minimum is refused (ErrMisconfigured, 500), one above is taken, and
// a trace id alone changes nothing.
func TestObserverChangesPreparedPolicy(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want int
	}{{time.Millisecond, http.StatusInternalServerError}, {time.Second, http.StatusOK}, {0, http.StatusOK}} {
		locker := lock.FromEngine(new(locktest.Engine), lock.Observe(retuner{tc.ttl}))
		r := chi.NewRouter()
		r.With(locker.ByParam("productID", lock.FailFast())).Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) {})
		srv := httptest.NewServer(r)
		res := do(t, httpClient(t, nil), "POST", srv.URL+"/products/42/buy", nil)
		srv.Close()
		if res.status != tc.want {
			t.Errorf("observer's TTL %v: %d %q, want %d", tc.ttl, res.status, res.body, tc.want)
		}
	}
}
