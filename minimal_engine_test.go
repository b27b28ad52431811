package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// miniEngine is the smallest engine: locks in a map under a mutex,
// exclusive only, waiters in no particular order, and no promise beyond
// mutual exclusion. Engines of one miniBackend share its locks, as the
// processes of one service share a lock service.
type miniEngine struct {
	b  *miniBackend
	ev lockcore.Events // nil for none
}

type miniBackend struct {
	mu    sync.Mutex
	held  map[lockcore.Key]chan struct{} // closed when the hold ends
	fence int64
}

func newMini(b *miniBackend, ev lockcore.Events) *miniEngine {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == nil {
		b.held = map[lockcore.Key]chan struct{}{}
	}
	return &miniEngine{b: b, ev: ev}
}

func (e *miniEngine) Promises() lockcore.Promises { return lockcore.Promises{} }

func (e *miniEngine) Acquire(ctx context.Context, key lockcore.Key, p lockcore.Policy) (*lockcore.Lease, error) {
	ls, p, err := lockcore.Begin(ctx, e, key, p)
	if ls != nil || err != nil {
		return ls, err
	}
	if p.Share != 0 {
		return nil, fmt.Errorf("%w: Share %d: exclusive holds only", lockcore.ErrMisconfigured, p.Share)
	}
	var budget <-chan time.Time
	if p.Wait != lockcore.FailFast {
		t := time.NewTimer(p.Wait)
		defer t.Stop()
		budget = t.C
	}
	waiting := false
	defer func() {
		if waiting && e.ev != nil {
			e.ev.Waiting(key, -1)
		}
	}()
	for {
		e.b.mu.Lock()
		gone, busy := e.b.held[key]
		if !busy {
			h := &miniHold{b: e.b, key: key, gone: make(chan struct{})}
			e.b.held[key] = h.gone
			e.b.fence++
			fence := e.b.fence
			e.b.mu.Unlock()
			ls := lockcore.NewLease(ctx, e, key, lockcore.NewToken(), fence, h, e.ev)
			lockcore.LimitHold(ls, p.MaxHold)
			return ls, nil
		}
		e.b.mu.Unlock()
		if budget == nil {
			return nil, &lockcore.ContentionError{Key: key.String()}
		}
		if !waiting && e.ev != nil {
			e.ev.Waiting(key, +1)
		}
		waiting = true
		select {
		case <-gone:
			e.woken(key, "message")
		case <-budget:
			e.woken(key, "timer")
			return nil, &lockcore.ContentionError{Key: key.String(), TimedOut: true}
		case <-ctx.Done():
			ce := &lockcore.ContentionError{Key: key.String(), TimedOut: errors.Is(ctx.Err(), context.DeadlineExceeded)}
			return nil, errors.Join(ce, ctx.Err())
		}
	}
}

func (e *miniEngine) woken(key lockcore.Key, by string) {
	if e.ev != nil {
		e.ev.Woken(key, by)
	}
}

// miniHold is a hold of a miniEngine: held until released.
type miniHold struct {
	b    *miniBackend
	key  lockcore.Key
	gone chan struct{}
}

func (h *miniHold) Check() error { return nil }

func (h *miniHold) Release(context.Context) error {
	h.b.mu.Lock()
	delete(h.b.held, h.key)
	h.b.mu.Unlock()
	close(h.gone)
	return nil
}

// TestMinimalEngine: an engine that promises nothing beyond mutual
// exclusion passes the conformance suite's checks that every engine
// passes, and only those run.
func TestMinimalEngine(t *testing.T) {
	var mu sync.Mutex
	backends := map[*testing.T]*miniBackend{}
	locktest.Run(t, func(t *testing.T, ev lockcore.Events) lockcore.Engine {
		mu.Lock()
		b := backends[t]
		if b == nil {
			b = new(miniBackend)
			backends[t] = b
		}
		mu.Unlock()
		return newMini(b, ev)
	})
}

// TestMinimalEngineServes: the minimal engine serves chi routes through
// lock.FromEngine and gRPC methods through the interceptor, over real HTTP
// and gRPC on loopback: 40 concurrent buyers of a stock of 10 buy exactly
// 10, never two inside one product's handler at once. A route that asks
// for what the engine does not promise (readers, permits) fails when it
// is built.
func TestMinimalEngineServes(t *testing.T) {
	locker := lock.FromEngine(newMini(new(miniBackend), nil))
	const buyers, initial = 40, 10
	var (
		mu     sync.Mutex
		stock  = map[string]int{}
		inside atomic.Int32
		twice  atomic.Int32
	)
	// buy sells one of product's stock, reading and writing it apart, and
	// reports whether it sold one.
	buy := func(product string) bool {
		if inside.Add(1) > 1 {
			twice.Add(1)
		}
		defer inside.Add(-1)
		mu.Lock()
		n := stock[product]
		mu.Unlock()
		runtime.Gosched()
		if n <= 0 {
			return false
		}
		mu.Lock()
		stock[product] = n - 1
		mu.Unlock()
		return true
	}
	check := func(what string, sold int) {
		t.Helper()
		if sold != initial || twice.Load() != 0 {
			t.Fatalf("%s: sold %d of %d; %d handlers began beside another", what, sold, initial, twice.Load())
		}
	}

	r := chi.NewRouter()
	r.With(locker.ByParam("productID", lock.Wait(10*time.Second))).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		if !buy(chi.URLParam(r, "productID")) {
			http.Error(w, "sold out", http.StatusGone)
		}
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	stock["7"] = initial
	var sold atomic.Int32
	var wg sync.WaitGroup
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := srv.Client().Post(srv.URL+"/products/7/buy", "", nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				sold.Add(1)
			}
		}()
	}
	wg.Wait()
	check("HTTP", int(sold.Load()))

	stock["42"] = initial
	addr := serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		if !buy("42") {
			return nil, status.Error(codes.ResourceExhausted, "sold out")
		}
		return shop.New("ReserveReply"), nil
	}}, grpc.ChainUnaryInterceptor(unaryServer(locker, interceptor.Method(shop.Reserve, interceptor.Field("product_id"), lock.Wait(10*time.Second)))))
	cc := dial(t, addr)
	sold.Store(0)
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := reserve(ctx, cc, 42); err == nil {
				sold.Add(1)
			} else if status.Code(err) != codes.ResourceExhausted {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	check("gRPC", int(sold.Load()))

	for _, p := range []lockcore.Policy{lock.Shared(), lock.Permits(3)} {
		func() {
			defer func() {
				msg := fmt.Sprint(recover())
				if !strings.Contains(msg, "does not promise") {
					t.Errorf("a route with Share %d on the minimal engine: panic %q, want one saying the engine does not promise it", p.Share, msg)
				}
			}()
			locker.ByParam("productID", p)
		}()
		func() {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.Contains(msg, "does not promise") {
					t.Errorf("a gRPC method with Share %d on the minimal engine: panic %q", p.Share, msg)
				}
			}()
			unaryServer(locker, interceptor.Method(shop.Reserve, interceptor.Field("product_id"), p))
		}()
	}
}
