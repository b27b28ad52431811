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
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// miniEngine is the smallest engine: an lockcore.Engine with locks in a
// map under a mutex, exclusive only, waiters in no particular order, and
// no promise beyond mutual exclusion. It takes holds and gives them back;
// lifecycle.Serve makes its leases. Engines of one miniBackend share its
// locks, as the processes of one service share a lock service.
type miniEngine struct {
	b      *miniBackend
	ev     lockcore.Events // nil for none
	closed chan struct{}
}

type miniBackend struct {
	mu    sync.Mutex
	held  map[lockcore.Key]*miniHold
	fence int64
}

func newMini(b *miniBackend, ev lockcore.Events) *miniEngine {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == nil {
		b.held = map[lockcore.Key]*miniHold{}
	}
	return &miniEngine{b: b, ev: ev, closed: make(chan struct{})}
}

func (e *miniEngine) Promises() lockcore.Promises { return lockcore.Promises{} }

func (e *miniEngine) Take(ctx context.Context, r lockcore.Request) (lockcore.Hold, error) {
	var budget <-chan time.Time
	if r.Wait != lockcore.FailFast {
		t := time.NewTimer(r.Wait)
		defer t.Stop()
		budget = t.C
	}
	waiting := false
	defer func() {
		if waiting && e.ev != nil {
			e.ev.Waiting(r.Key, -1)
		}
	}()
	for {
		e.b.mu.Lock()
		cur := e.b.held[r.Key]
		if cur == nil && !isClosed(e.closed) {
			e.b.fence++
			h := &miniHold{e: e, key: r.Key, token: r.Token, fence: e.b.fence, gone: make(chan struct{})}
			e.b.held[r.Key] = h
			e.b.mu.Unlock()
			return h, nil
		}
		e.b.mu.Unlock()
		ce := &lockcore.ContentionError{Key: r.Key.String()}
		switch {
		case isClosed(e.closed):
			return nil, lockcore.ErrClosed
		case budget == nil:
			return nil, ce
		case !waiting && e.ev != nil:
			e.ev.Waiting(r.Key, +1)
		}
		waiting = true
		select {
		case <-cur.gone:
			e.woken(r.Key, "message")
		case <-budget:
			e.woken(r.Key, "timer")
			ce.TimedOut = true
			return nil, ce
		case <-ctx.Done():
			ce.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
			return nil, errors.Join(ce, ctx.Err())
		case <-e.closed:
		}
	}
}

func (e *miniEngine) woken(key lockcore.Key, by string) {
	if e.ev != nil {
		e.ev.Woken(key, by)
	}
}

// Close fails the engine's waiters and loses its holds.
func (e *miniEngine) Close() error {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if !isClosed(e.closed) {
		close(e.closed)
		for _, h := range e.b.held {
			if h.e == e {
				h.end(lockcore.ErrClosed)
			}
		}
	}
	return nil
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// miniHold is a hold of a miniEngine: held until released or its engine
// closes.
type miniHold struct {
	e     *miniEngine
	key   lockcore.Key
	token string
	fence int64
	gone  chan struct{} // closed when the hold ends
	err   error         // why it was lost; set before gone is closed
}

// end ends the hold, lost with cause unless nil; b.mu is held.
func (h *miniHold) end(cause error) {
	delete(h.e.b.held, h.key)
	if cause != nil {
		h.err = fmt.Errorf("%w: %w", lockcore.ErrLockLost, cause)
	}
	close(h.gone)
}

func (h *miniHold) Fence() int64          { return h.fence }
func (h *miniHold) Shared() (int, bool)   { return -1, false }
func (h *miniHold) Token() string         { return h.token }
func (h *miniHold) Done() <-chan struct{} { return h.gone }

func (h *miniHold) Err() error {
	h.e.b.mu.Lock()
	defer h.e.b.mu.Unlock()
	return h.err
}

func (h *miniHold) Release(context.Context, error) error {
	h.e.b.mu.Lock()
	defer h.e.b.mu.Unlock()
	if h.e.b.held[h.key] == h {
		h.end(nil)
	}
	return nil
}

// TestMinimalEngine: a backend that promises nothing beyond mutual
// exclusion passes the conformance suite's
// checks that every engine passes, and only those run.
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

	for _, p := range []lifecycle.Policy{lock.Shared(), lock.Permits(3)} {
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
