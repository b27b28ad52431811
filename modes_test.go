package lock_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// modeRoutes are the routes of one instance of TestHTTPModes: readers,
// writers and buyers with permits of one product, each answering with its
// fence and slot; a request with ?hold stays in its handler until the
// test closes the instance's release channel for it.
type modeRoutes struct {
	entered chan string   // the path of each request with ?hold, once inside
	release chan struct{} // one receive lets one ?hold request go
}

func (m *modeRoutes) handler(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("hold") {
		m.entered <- r.URL.Path
		select {
		case <-m.release:
		case <-r.Context().Done():
		}
	}
	fence, _ := lock.FencingToken(r.Context())
	slot, ok := lock.Slot(r.Context())
	if !ok {
		slot = -1
	}
	fmt.Fprintf(w, "%d %d", fence, slot)
}

func (m *modeRoutes) build(a *app) http.Handler {
	r := chi.NewRouter()
	r.With(a.locker.ByParam("productID", lock.Shared(), lock.FailFast())).Get("/products/{productID}", m.handler)
	r.With(a.locker.ByParam("productID", lock.FailFast())).Put("/products/{productID}", m.handler)
	r.With(a.locker.ByParam("productID", lock.Wait(8*time.Second))).Put("/products/{productID}/wait", m.handler)
	r.With(a.locker.ByParam("productID", lock.Permits(2), lock.FailFast())).Post("/products/{productID}/buy", m.handler)
	return r
}

// fenceSlot reads a modeRoutes answer.
func fenceSlot(t *testing.T, res result) (int64, int) {
	t.Helper()
	f, s, ok := strings.Cut(res.body, " ")
	fence, err1 := strconv.ParseInt(f, 10, 64)
	slot, err2 := strconv.Atoi(s)
	if res.status != http.StatusOK || !ok || err1 != nil || err2 != nil {
		t.Fatalf("answer %d %q, want 200 with a fence and a slot", res.status, res.body)
	}
	return fence, slot
}

// TestHTTPModes: over two instances, readers (Shared) hold one product at
// once and a writer is refused with 409 and Retry-After until they leave,
// then gets a greater fence; buyers with Permits(2) hold slots 0 and 1, a
// third is refused, and a freed slot is the next buyer's.
func TestHTTPModes(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		m := &modeRoutes{entered: make(chan string, 4), release: make(chan struct{})}
		a1, a2 := newApp(t, b, prefix, m.build), newApp(t, b, prefix, m.build)
		hc := httpClient(t, nil)
		held := func(a *app, method, path string) <-chan result {
			out := make(chan result, 1)
			go func() { out <- do(t, hc, method, a.srv.URL+path+"?hold", nil) }()
			select {
			case <-m.entered:
			case res := <-out:
				t.Fatalf("%s %s?hold: %d %q, want it inside its handler", method, path, res.status, res.body)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s %s?hold never entered its handler", method, path)
			}
			return out
		}

		// Readers share; a writer waits for all of them.
		r1 := held(a1, "GET", "/products/42")
		f2, _ := fenceSlot(t, do(t, hc, "GET", a2.srv.URL+"/products/42", nil))
		busy := do(t, hc, "PUT", a2.srv.URL+"/products/42", nil)
		if busy.status != http.StatusConflict || busy.header.Get("Retry-After") == "" {
			t.Fatalf("a writer while a reader holds: %d %q (Retry-After %q), want 409 with Retry-After", busy.status, busy.body, busy.header.Get("Retry-After"))
		}
		w := make(chan result, 1)
		go func() { w <- do(t, hc, "PUT", a2.srv.URL+"/products/42/wait", nil) }()
		eventually(t, 5*time.Second, "the writer queued", func() bool { return len(inspect(t, a1.locker, key(t, "productID", "42")).Waiters) == 1 })
		m.release <- struct{}{}
		f1, _ := fenceSlot(t, <-r1)
		fw, _ := fenceSlot(t, <-w)
		if f1 == f2 || fw <= max(f1, f2) {
			t.Fatalf("fences: readers %d and %d, then the writer %d; want distinct, then greater", f1, f2, fw)
		}

		// Permits: two slots, a third buyer refused, a freed slot reused.
		b1 := held(a1, "POST", "/products/7/buy")
		b2 := held(a2, "POST", "/products/7/buy")
		info := inspect(t, a1.locker, key(t, "productID", "7"))
		if len(info.Holders) != 2 || info.Holders[0].Slot != 0 || info.Holders[1].Slot != 1 || info.Holders[0].Share != 2 {
			t.Fatalf("two buyers inside: holders %+v, want slots 0 and 1 of 2 permits", info.Holders)
		}
		if res := do(t, hc, "POST", a1.srv.URL+"/products/7/buy", nil); res.status != http.StatusConflict {
			t.Fatalf("a third buyer with 2 permits: %d %q, want 409", res.status, res.body)
		}
		m.release <- struct{}{} // one of the two buyers leaves
		var first result
		select {
		case first = <-b1:
		case first = <-b2:
		}
		_, freed := fenceSlot(t, first)
		var again result
		eventually(t, 5*time.Second, "a freed permit", func() bool {
			again = do(t, hc, "POST", a2.srv.URL+"/products/7/buy", nil)
			return again.status == http.StatusOK
		})
		if _, s := fenceSlot(t, again); s != freed {
			t.Fatalf("the next buyer's slot %d, want the freed %d", s, freed)
		}
		m.release <- struct{}{}
		for _, k := range []string{"42", "7"} {
			eventually(t, 5*time.Second, "every hold released", func() bool {
				return len(inspect(t, a2.locker, key(t, "productID", k)).Holders) == 0
			})
		}
	})
}

// TestModesAcrossProtocols: in each mode, an HTTP route calls the gRPC
// method Reserve of another process, which calls back an HTTP route of a
// third, all locking product 42 in that mode: the three re-enter one hold
// with one fence (and, with permits, one slot), and nothing is held after
// the outermost returns. A reader's request asking for the exclusive lock
// downstream is refused at once: 409 without Retry-After over HTTP,
// FailedPrecondition over gRPC.
func TestModesAcrossProtocols(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		k := key(t, "productID", "42")
		modes := []struct {
			name  string
			p     lifecycle.Policy
			inner lifecycle.Policy // the innermost HTTP route's
		}{
			{"exclusive", lock.FailFast(), lock.FailFast()},
			{"shared", lock.Shared(), lock.Shared()},
			{"permits", lock.Permits(3), lock.Permits(3)},
			{"writer-then-readers", lock.FailFast(), lock.Shared()},
		}
		for _, mode := range modes {
			t.Run(mode.name, func(t *testing.T) {
				type seen struct {
					fence int64
					slot  int
				}
				saw := make(chan seen, 3)
				record := func(ctx context.Context) {
					f, _ := lock.FencingToken(ctx)
					s, ok := lock.Slot(ctx)
					if !ok {
						s = -1
					}
					saw <- seen{f, s}
				}
				// C: HTTP, the innermost.
				c := newApp(t, b, prefix, func(a *app) http.Handler {
					r := chi.NewRouter()
					r.With(a.locker.ByParam("productID", mode.inner, lock.FailFast())).Post("/products/{productID}/audit", func(w http.ResponseWriter, r *http.Request) {
						record(r.Context())
					})
					return r
				})
				// B: gRPC, calls C with the token.
				bLocker := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix})
				t.Cleanup(func() { bLocker.Close() })
				hc := httpClient(t, middleware.Transport(nil))
				bAddr := serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
					record(ctx)
					code, err := post(ctx, hc, c.srv.URL+"/products/42/audit")
					if err != nil || code != http.StatusOK {
						return nil, status.Errorf(codes.FailedPrecondition, "audit: %d %v", code, err)
					}
					return shop.New("ReserveReply"), nil
				}}, grpc.ChainUnaryInterceptor(unaryServer(bLocker,
					interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"), mode.p, lock.FailFast()))))
				cc := dial(t, bAddr, grpc.WithChainUnaryInterceptor(interceptor.UnaryClient()))
				// A: HTTP, the outermost, calls B.
				a := newApp(t, b, prefix, func(a *app) http.Handler {
					r := chi.NewRouter()
					r.With(a.locker.ByParam("productID", mode.p, lock.FailFast())).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
						record(r.Context())
						if _, err := reserve(r.Context(), cc, 42); err != nil {
							http.Error(w, status.Code(err).String(), http.StatusBadGateway)
						}
					})
					return r
				})
				if res := do(t, httpClient(t, nil), "POST", a.srv.URL+"/products/42/buy", nil); res.status != http.StatusOK {
					t.Fatalf("HTTP → gRPC → HTTP: %d %q", res.status, res.body)
				}
				outer := <-saw
				for range 2 {
					if s := <-saw; s != outer {
						t.Fatalf("a nested call saw fence %d slot %d, want the outermost's %d and %d", s.fence, s.slot, outer.fence, outer.slot)
					}
				}
				if outer.fence == 0 || (mode.name == "permits") != (outer.slot >= 0) {
					t.Fatalf("the outermost call: fence %d, slot %d", outer.fence, outer.slot)
				}
				eventually(t, 5*time.Second, "nothing held after the outermost call", func() bool {
					return len(inspect(t, bLocker, k).Holders) == 0
				})
			})
		}

		t.Run("upgrade", func(t *testing.T) {
			writerHTTP := newApp(t, b, prefix, func(a *app) http.Handler {
				r := chi.NewRouter()
				r.With(a.locker.ByParam("productID", lock.Wait(5*time.Second))).Put("/products/{productID}", func(w http.ResponseWriter, r *http.Request) {})
				return r
			})
			wLocker := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix})
			t.Cleanup(func() { wLocker.Close() })
			wAddr := serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
				return shop.New("ReserveReply"), nil
			}}, grpc.ChainUnaryInterceptor(unaryServer(wLocker,
				interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"), lock.Wait(5*time.Second)))))
			cc := dial(t, wAddr, grpc.WithChainUnaryInterceptor(interceptor.UnaryClient()))
			hc := httpClient(t, middleware.Transport(nil))
			type answer struct {
				status     int
				body       string
				retryAfter string
				code       codes.Code
				took       time.Duration
			}
			got := make(chan answer, 1)
			reader := newApp(t, b, prefix, func(a *app) http.Handler {
				r := chi.NewRouter()
				r.With(a.locker.ByParam("productID", lock.Shared())).Get("/products/{productID}", func(w http.ResponseWriter, r *http.Request) {
					var ans answer
					start := time.Now()
					req, _ := http.NewRequestWithContext(r.Context(), "PUT", writerHTTP.srv.URL+"/products/42", nil)
					if resp, err := hc.Do(req); err == nil {
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						ans.status, ans.body, ans.retryAfter = resp.StatusCode, string(body), resp.Header.Get("Retry-After")
					}
					_, err := reserve(r.Context(), cc, 42)
					ans.code, ans.took = status.Code(err), time.Since(start)
					got <- ans
				})
				return r
			})
			if res := do(t, httpClient(t, nil), "GET", reader.srv.URL+"/products/42", nil); res.status != http.StatusOK {
				t.Fatalf("the reader: %d %q", res.status, res.body)
			}
			ans := <-got
			if ans.status != http.StatusConflict || ans.retryAfter != "" || !strings.Contains(ans.body, "shared") {
				t.Fatalf("a writer route called by a reader's request: %d %q (Retry-After %q), want 409 without Retry-After", ans.status, ans.body, ans.retryAfter)
			}
			if ans.code != codes.FailedPrecondition {
				t.Fatalf("a writer method called by a reader's request: %v, want FailedPrecondition", ans.code)
			}
			if ans.took > 4*time.Second {
				t.Fatalf("the refusals took %v: they waited, where they must fail at once", ans.took)
			}
			eventually(t, 5*time.Second, "nothing held after the reader", func() bool {
				return len(inspect(t, wLocker, k).Holders) == 0
			})
		})
	})
}

// modeShop is a gRPC server of Reserve locked on product_id in one mode,
// answering with its fence and its slot (as left; -1 for none); a call
// with quantity 2 stays in the handler until the test sends on release.
type modeShop struct {
	addr    string
	entered chan struct{}
	release chan struct{}
}

func newModeShop(t *testing.T, b *redistest.Backend, prefix string, ps ...lifecycle.Policy) *modeShop {
	m := &modeShop{entered: make(chan struct{}, 4), release: make(chan struct{})}
	l := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix})
	t.Cleanup(func() { l.Close() })
	m.addr = serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		if shop.Int(req, "quantity") == 2 {
			m.entered <- struct{}{}
			select {
			case <-m.release:
			case <-ctx.Done():
			}
		}
		fence, _ := lock.FencingToken(ctx)
		slot, ok := lock.Slot(ctx)
		if !ok {
			slot = -1
		}
		return shop.Set(shop.New("ReserveReply"), "fence", fence, "left", int64(slot)), nil
	}}, grpc.ChainUnaryInterceptor(unaryServer(l,
		interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"), ps...))))
	return m
}

// call calls Reserve on m for product 42, holding it in the handler when
// hold is set.
func (m *modeShop) call(t *testing.T, hold bool) (*dynamicpb.Message, error) {
	req := shop.Set(shop.New("ReserveRequest"), "product_id", int64(42), "quantity", int32(1))
	if hold {
		shop.Set(req, "quantity", int32(2))
	}
	reply := shop.New("ReserveReply")
	err := dial(t, m.addr).Invoke(context.Background(), shop.Reserve, req, reply)
	return reply, err
}

// held starts a call that holds its lock in the handler, and returns when
// it is inside.
func (m *modeShop) held(t *testing.T) <-chan error {
	done := make(chan error, 1)
	go func() { _, err := m.call(t, true); done <- err }()
	select {
	case <-m.entered:
	case err := <-done:
		t.Fatalf("a holding call: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a holding call never entered its handler")
	}
	return done
}

// TestGRPCModes: the same modes per gRPC method, over servers sharing
// their locks: readers hold product 42 together while a writer method is
// Aborted with RetryInfo, and gets it once they leave; two permits of two
// are held in slots 0 and 1, a third call is Aborted, and a freed slot is
// the next call's.
func TestGRPCModes(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		readers := newModeShop(t, b, prefix, lock.Shared(), lock.FailFast())
		writer := newModeShop(t, b, prefix, lock.FailFast())
		first := readers.held(t)
		if r, err := readers.call(t, false); err != nil || shop.Int(r, "left") != -1 {
			t.Fatalf("a second reader beside the first: %v (slot %d)", err, shop.Int(r, "left"))
		}
		_, err := writer.call(t, false)
		wantCode(t, err, codes.Aborted)
		if len(status.Convert(err).Details()) == 0 {
			t.Fatalf("the writer's Aborted carries no RetryInfo: %v", err)
		}
		readers.release <- struct{}{}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		var w *dynamicpb.Message
		eventually(t, 5*time.Second, "the writer gets the lock", func() bool {
			w, err = writer.call(t, false)
			return err == nil
		})
		if shop.Int(w, "fence") == 0 || shop.Int(w, "left") != -1 {
			t.Fatalf("the writer: fence %d slot %d", shop.Int(w, "fence"), shop.Int(w, "left"))
		}

		prefix = redistest.Prefix(t)
		p1, p2 := newModeShop(t, b, prefix, lock.Permits(2), lock.FailFast()), newModeShop(t, b, prefix, lock.Permits(2), lock.FailFast())
		h1, h2 := p1.held(t), p2.held(t)
		_, err = p1.call(t, false)
		wantCode(t, err, codes.Aborted)
		p2.release <- struct{}{}
		if err := <-h2; err != nil {
			t.Fatal(err)
		}
		var r *dynamicpb.Message
		eventually(t, 5*time.Second, "a freed permit", func() bool {
			r, err = p1.call(t, false)
			return err == nil
		})
		p1.release <- struct{}{}
		if err := <-h1; err != nil {
			t.Fatal(err)
		}
		// The first holder took slot 0, the second slot 1, which it freed.
		if s := shop.Int(r, "left"); s != 1 {
			t.Fatalf("the call after slot 1 was freed got slot %d", s)
		}
	})
}
