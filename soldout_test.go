package lock_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestHTTPSoldOut: a flash sale of 10 on three instances, 40 buyers at
// once: exactly 10 sold, and once a handler declares the product sold out
// (lock.SoldOut), every instance answers 410 Gone for it without running
// the handler and without a command to Redis (counted by a hook on each
// instance's client, and on a single server by its INFO commandstats);
// another product is untouched; an opened gate lets buyers in again. On
// every deployment; the server's count on a redis-server of its own.
func TestHTTPSoldOut(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		var stock, sold, ran atomic.Int64
		stock.Store(10)
		build := func(a *app) http.Handler {
			r := chi.NewRouter()
			r.With(a.locker.ByParam("productID", lock.Wait(20*time.Second))).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
				ran.Add(1)
				if chi.URLParam(r, "productID") == "42" && stock.Add(-1) < 0 {
					if err := lock.SoldOut(r.Context(), 0); err != nil {
						t.Errorf("SoldOut: %v", err)
					}
					http.Error(w, "sold out", http.StatusGone)
					return
				}
				sold.Add(1)
			})
			return r
		}
		apps := make([]*app, 3)
		trips := make([]*redistest.Trips, 3)
		for i := range apps {
			c := clientOf(t, b)
			trips[i] = &redistest.Trips{}
			redistest.CountTrips(c, trips[i])
			apps[i] = newAppOn(t, c, prefix, build)
		}
		hc := httpClient(t, nil)
		buy := func(a *app, product string) result {
			return do(t, hc, "POST", a.srv.URL+"/products/"+product+"/buy", nil)
		}

		var wg sync.WaitGroup
		var ok, gone atomic.Int64
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch res := buy(apps[i%3], "42"); res.status {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusGone:
					gone.Add(1)
				default:
					t.Errorf("purchase: %d %q", res.status, res.body)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 10 || sold.Load() != 10 || gone.Load() != 30 {
			t.Fatalf("%d purchases answered 200 and %d sold, %d answered 410; want 10, 10, 30", ok.Load(), sold.Load(), gone.Load())
		}

		// Every instance knows (the gate reached them), then answers from
		// memory.
		for i, a := range apps {
			eventually(t, 5*time.Second, "instance "+strconv.Itoa(i)+" refusing the sold-out product", func() bool {
				before := ran.Load()
				res := buy(a, "42")
				return res.status == http.StatusGone && ran.Load() == before
			})
		}
		runs := ran.Load()
		for i, a := range apps {
			before := trips[i].N()
			for range 20 {
				res := buy(a, "42")
				if res.status != http.StatusGone || !strings.Contains(res.body, "sold out") || res.header.Get("Retry-After") != "" {
					t.Fatalf("instance %d, sold-out product: %d %q (Retry-After %q), want 410 sold out without Retry-After", i, res.status, res.body, res.header.Get("Retry-After"))
				}
			}
			if n := trips[i].N() - before; n != 0 {
				t.Fatalf("instance %d sent %d commands to Redis for 20 requests for a sold-out product, want 0", i, n)
			}
		}
		if ran.Load() != runs {
			t.Fatalf("the handler ran %d times for a sold-out product", ran.Load()-runs)
		}
		if b.Real() && !b.MultiNode() {
			serverRunsNothing(t, build)
		}
		if res := buy(apps[1], "7"); res.status != http.StatusOK {
			t.Fatalf("another product: %d %q", res.status, res.body)
		}

		gk, isGK := apps[2].locker.Operator().(lockcore.Gatekeeper)
		if !isGK {
			t.Fatal("the Redis engine is no lockcore.Gatekeeper")
		}
		gates, err := gk.Gates(context.Background())
		if err != nil || len(gates) != 1 || gates[0].Key != key(t, "productID", "42") || !gates[0].Until.IsZero() {
			t.Fatalf("Gates: %+v %v, want productID:42's, closed until opened", gates, err)
		}
		stock.Store(5) // restocked
		if err := gk.OpenGate(context.Background(), key(t, "productID", "42")); err != nil {
			t.Fatal(err)
		}
		for i, a := range apps {
			eventually(t, 5*time.Second, "instance "+strconv.Itoa(i)+" selling again", func() bool {
				return buy(a, "42").status == http.StatusOK
			})
		}
	})
}

// serverRunsNothing counts, on a redis-server of its own (a shared one
// runs other tests' scripts meanwhile), the scripts the server runs while
// an instance answers 20 requests for a sold-out product: by its INFO
// commandstats, none. Without redis-server on PATH (REDIS_ADDR only) it
// says so and checks nothing more: the client hooks counted already.
func serverRunsNothing(t *testing.T, build func(a *app) http.Handler) {
	srv, err := redistest.Start()
	if err != nil {
		t.Logf("no redis-server of the test's own (%v): INFO commandstats not counted", err)
		return
	}
	t.Cleanup(srv.Stop)
	b := redistest.At(srv.Addr)
	a := newAppOn(t, clientOf(t, b), redistest.Prefix(t), build)
	gk := a.locker.Operator().(lockcore.Gatekeeper)
	if err := gk.CloseGate(context.Background(), key(t, "productID", "42"), 0); err != nil {
		t.Fatal(err)
	}
	hc := httpClient(t, nil)
	before := scriptCalls(t, b)
	for range 20 {
		if res := do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil); res.status != http.StatusGone {
			t.Fatalf("sold-out product on the test's own server: %d %q", res.status, res.body)
		}
	}
	if got := scriptCalls(t, b); got != before {
		t.Fatalf("Redis ran %d lock scripts during 20 requests for a sold-out product, want 0", got-before)
	}
}

// scriptCalls returns how many times b's server ran a script (EVALSHA,
// EVAL), from INFO commandstats.
func scriptCalls(t *testing.T, b *redistest.Backend) int64 {
	t.Helper()
	info, err := b.Client(t).Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				c, _, _ := strings.Cut(v, ",")
				x, _ := strconv.ParseInt(c, 10, 64)
				n += x
			}
		}
	}
	return n
}

// TestGRPCSoldOut: the same over gRPC: once the method's handler declares
// the product sold out, calls for it fail with FailedPrecondition carrying
// an ErrorInfo of reason SOLD_OUT, without the handler and without a
// command to Redis; other products are served.
func TestGRPCSoldOut(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := b.Client(t)
		trips := &redistest.Trips{}
		c.AddHook(trips)
		l := lock.NewRedis(c, redisengine.Options{Prefix: redistest.Prefix(t)})
		t.Cleanup(func() { l.Close() })
		var ran atomic.Int64
		addr := serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			ran.Add(1)
			if shop.Int(req, "product_id") == 42 {
				if err := lock.SoldOut(ctx, 0); err != nil {
					return nil, err
				}
				return nil, status.Error(codes.FailedPrecondition, "sold out")
			}
			return shop.New("ReserveReply"), nil
		}}, grpc.ChainUnaryInterceptor(unaryServer(l, interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID")))))
		cc := dial(t, addr)
		ctx := context.Background()
		_, _ = reserve(ctx, cc, 42) // the handler finds it sold out
		runs, before := ran.Load(), trips.N()
		for range 10 {
			_, err := reserve(ctx, cc, 42)
			st, _ := status.FromError(err)
			var reason string
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					reason = info.Reason
				}
			}
			if st.Code() != codes.FailedPrecondition || reason != "SOLD_OUT" {
				t.Fatalf("a call for a sold-out product: %v (reason %q), want FailedPrecondition with reason SOLD_OUT", err, reason)
			}
		}
		if ran.Load() != runs || trips.N() != before {
			t.Fatalf("10 calls for a sold-out product ran the handler %d times and sent %d commands, want 0 and 0", ran.Load()-runs, trips.N()-before)
		}
		if _, err := reserve(ctx, cc, 7); err != nil {
			t.Fatalf("another product: %v", err)
		}
	})
}

// gateShop is a flash sale of one product's stock over HTTP: buy takes
// one (an exclusive lock; SoldOut once none is left, answering 410), show
// reads it (a reader, lock.Shared), restock adds 5 and reopens the gate
// (lock.Restock, lock.InStock). It counts the entries of each handler.
type gateShop struct {
	stock                 atomic.Int64
	buys, shows, restocks atomic.Int64
	t                     *testing.T
}

func (s *gateShop) build(a *app) http.Handler {
	r := chi.NewRouter()
	r.With(a.locker.ByParam("productID", lock.Wait(5*time.Second))).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		s.buys.Add(1)
		if s.stock.Add(-1) < 0 {
			s.stock.Add(1)
			if err := lock.SoldOut(r.Context(), 0); err != nil {
				s.t.Errorf("SoldOut: %v", err)
			}
			http.Error(w, "sold out", http.StatusGone)
			return
		}
		fmt.Fprintln(w, "bought")
	})
	r.With(a.locker.ByParam("productID", lock.Shared())).Get("/products/{productID}", func(w http.ResponseWriter, r *http.Request) {
		s.shows.Add(1)
		fmt.Fprintf(w, "%d left\n", s.stock.Load())
	})
	r.With(a.locker.ByParam("productID", lock.Restock())).Post("/products/{productID}/restock", func(w http.ResponseWriter, r *http.Request) {
		s.restocks.Add(1)
		s.stock.Add(5)
		if err := lock.InStock(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "restocked")
	})
	return r
}

// firstBuys sends n buys for product 42 at once to a, and returns how many
// were answered 410 and how many times the buy handler ran meanwhile.
func (s *gateShop) firstBuys(t *testing.T, hc *http.Client, a *app, n int) (gone, ran int64) {
	t.Helper()
	before := s.buys.Load()
	var wg sync.WaitGroup
	var g atomic.Int64
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res := do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil); res.status == http.StatusGone {
				g.Add(1)
			} else {
				t.Errorf("a buy of a sold-out product: %d %q, want 410", res.status, res.body)
			}
		}()
	}
	wg.Wait()
	return g.Load(), s.buys.Load() - before
}

// TestSoldOutNewInstance: once a product is sold out, an instance started
// after it refuses the product from its very first requests: 16 buys at
// once as the first requests of each of 4 new instances are all answered
// 410, and the buy handler never runs.
func TestSoldOutNewInstance(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		s := &gateShop{t: t}
		hc := httpClient(t, nil)
		first := newApp(t, b, prefix, s.build)
		if res := do(t, hc, "POST", first.srv.URL+"/products/42/buy", nil); res.status != http.StatusGone || s.buys.Load() != 1 {
			t.Fatalf("the buy that finds the stock empty: %d %q, want 410 from the handler", res.status, res.body)
		}
		var gone, ran int64
		for range 4 {
			g, r := s.firstBuys(t, hc, newApp(t, b, prefix, s.build), 16)
			gone, ran = gone+g, ran+r
		}
		if gone != 4*16 || ran != 0 {
			t.Fatalf("first buys of new instances of a sold-out product: %d answered 410, the handler ran %d times; want %d and 0", gone, ran, 4*16)
		}
	})
}

// TestSoldOutReaderAndRestock: a sold-out product's reader route
// (lock.Shared) still runs on every instance and shows "0 left"; its
// restock route (lock.Restock) runs through the closed gate and reopens
// it (lock.InStock), after which every instance sells again.
func TestSoldOutReaderAndRestock(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		s := &gateShop{t: t}
		s.stock.Store(1)
		hc := httpClient(t, nil)
		a, c := newApp(t, b, prefix, s.build), newApp(t, b, prefix, s.build)
		buy := func(x *app) result { return do(t, hc, "POST", x.srv.URL+"/products/42/buy", nil) }
		if res := buy(a); res.status != http.StatusOK {
			t.Fatalf("the last item: %d %q", res.status, res.body)
		}
		if res := buy(c); res.status != http.StatusGone {
			t.Fatalf("a buy after the last item: %d %q, want 410", res.status, res.body)
		}
		eventually(t, 5*time.Second, "the other instance refusing the sold-out product", func() bool {
			before := s.buys.Load()
			return buy(a).status == http.StatusGone && s.buys.Load() == before
		})
		for i, x := range []*app{a, c} {
			before := s.shows.Load()
			res := do(t, hc, "GET", x.srv.URL+"/products/42", nil)
			if res.status != http.StatusOK || res.body != "0 left\n" || s.shows.Load() != before+1 {
				t.Fatalf("instance %d, the sold-out product's page: %d %q (its handler ran %d times), want 200 \"0 left\" from the handler",
					i, res.status, res.body, s.shows.Load()-before)
			}
		}
		res := do(t, hc, "POST", c.srv.URL+"/products/42/restock", nil)
		if res.status != http.StatusOK || s.restocks.Load() != 1 {
			t.Fatalf("restocking the sold-out product: %d %q (its handler ran %d times), want 200 from the handler", res.status, res.body, s.restocks.Load())
		}
		for i, x := range []*app{c, a} {
			eventually(t, 5*time.Second, "instance "+strconv.Itoa(i)+" selling the restocked product", func() bool {
				return buy(x).status == http.StatusOK
			})
		}
	})
}

// TestSoldOutAcrossRestart: what a sold-out gate survives, as
// docs/modes.md says, on a redis-server of the test's own killed and
// started again. With an append-only file the gate is still closed after
// the restart: the instance that was running and a new one answer 410
// without running the handler. Without persistence the gate is gone with
// the rest of Redis's data: the next buy runs the handler, which finds
// the stock empty and closes the gate again, after which a new instance
// refuses the product from its first request.
func TestSoldOutAcrossRestart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(testing.TB) *redistest.Server
		kept  bool
	}{{"append-only file", redistest.OwnReal, true}, {"no persistence", redistest.OwnVolatile, false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.start(t)
			if srv == nil {
				return
			}
			b := redistest.At(srv.Addr)
			prefix := redistest.Prefix(t)
			s := &gateShop{t: t}
			hc := httpClient(t, nil)
			// A short TTL, and as the bound of every lease: the restart
			// guard of a server without persistence lasts that long.
			short := lock.Defaults(lock.TTL(100 * time.Millisecond))
			opt := redisengine.Options{Prefix: prefix, MaxTTL: 100 * time.Millisecond}
			a := newAppWith(t, clientOf(t, b), opt, s.build, short)
			buy := func(x *app) result { return do(t, hc, "POST", x.srv.URL+"/products/42/buy", nil) }
			if res := buy(a); res.status != http.StatusGone || s.buys.Load() != 1 {
				t.Fatalf("the buy that finds the stock empty: %d %q, want 410 from the handler", res.status, res.body)
			}
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			if tc.kept {
				// The running instance is back on Redis (its reader route
				// answers), and has read the gates again: still closed.
				eventually(t, 10*time.Second, "the running instance answering after the restart", func() bool {
					return do(t, hc, "GET", a.srv.URL+"/products/42", nil).status == http.StatusOK
				})
				gk := a.locker.Operator().(lockcore.Gatekeeper)
				if gates, err := gk.Gates(context.Background()); err != nil || len(gates) != 1 {
					t.Fatalf("Gates after a restart with an append-only file: %+v %v, want the product's", gates, err)
				}
				if g, r := s.firstBuys(t, hc, a, 16); g != 16 || r != 0 {
					t.Fatalf("the running instance after the restart: %d of 16 buys answered 410, the handler ran %d times; want 16 and 0", g, r)
				}
			} else {
				// Gone: the next buy reaches the handler (once the restart
				// guard lets locks be taken), which closes it again.
				before := s.buys.Load()
				eventually(t, 10*time.Second, "a buy reaching the handler after the gate was lost", func() bool {
					buy(a)
					return s.buys.Load() > before
				})
				if res := buy(a); res.status != http.StatusGone {
					t.Fatalf("a buy after the handler closed the gate again: %d %q, want 410", res.status, res.body)
				}
			}
			if g, r := s.firstBuys(t, hc, newAppWith(t, clientOf(t, b), opt, s.build, short), 16); g != 16 || r != 0 {
				t.Fatalf("a new instance after the restart: %d of 16 first buys answered 410, the handler ran %d times; want 16 and 0", g, r)
			}
		})
	}
}
