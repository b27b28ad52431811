package lock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// segStock is a product's stock kept in segments, each part guarded by
// its segment's lock alone, and the checker of its sale: it counts the
// handlers inside each segment (never two may be), the runs of each
// request's handler (one each) and what was sold to whom.
type segStock struct {
	stock    []int // stock[i]: guarded by segment i's lock
	inside   []atomic.Int32
	overlaps atomic.Int64
	moves    atomic.Int64
	runs     sync.Map // buyer → *atomic.Int32
	soldTo   sync.Map // buyer → segment
}

func newSegStock(segments, perSegment int) *segStock {
	s := &segStock{stock: make([]int, segments), inside: make([]atomic.Int32, segments)}
	for i := range s.stock {
		s.stock[i] = perSegment
	}
	return s
}

// buy is a handler's body: it sells buyer one item from the segment ctx
// holds, moving on with lock.NextSegment while that segment's part is
// empty; it returns the segment sold from, or NextSegment's error.
func (s *segStock) buy(t *testing.T, ctx context.Context, buyer string) (int, error) {
	n, _ := s.runs.LoadOrStore(buyer, new(atomic.Int32))
	n.(*atomic.Int32).Add(1)
	for {
		seg, ok := lock.Slot(ctx)
		if !ok || seg < 0 || seg >= len(s.stock) {
			t.Errorf("lock.Slot = %d, %v", seg, ok)
			return -1, errors.New("no segment")
		}
		if s.inside[seg].Add(1) != 1 {
			s.overlaps.Add(1)
		}
		if left := s.stock[seg]; left > 0 {
			runtime.Gosched() // where a missing lock lets another buyer in
			s.stock[seg] = left - 1
			s.inside[seg].Add(-1)
			if _, dup := s.soldTo.LoadOrStore(buyer, seg); dup {
				t.Errorf("buyer %s bought twice", buyer)
			}
			return seg, nil
		}
		s.inside[seg].Add(-1)
		if err := ctx.Err(); err != nil {
			t.Errorf("the handler's context ended: %v", context.Cause(ctx))
			return -1, err
		}
		s.moves.Add(1)
		if err := lock.NextSegment(ctx); err != nil {
			return -1, err
		}
	}
}

// check verifies the sale once every buyer was answered: no overlap, the
// whole stock sold, each to one buyer, each buyer's handler run at most
// once (a request refused from memory, sold out, runs none), ran times in
// all.
func (s *segStock) check(t *testing.T, ran int64, sold int) {
	t.Helper()
	if n := s.overlaps.Load(); n != 0 {
		t.Fatalf("%d times two handlers were inside one segment at once", n)
	}
	total, stock := 0, 0
	for i := range s.stock {
		total += s.stock[i] // every handler has returned
	}
	s.soldTo.Range(func(_, _ any) bool { stock++; return true })
	if total != 0 || stock != sold {
		t.Fatalf("%d items left, %d sold; want 0 left, %d sold", total, stock, sold)
	}
	buyers := 0
	s.runs.Range(func(b, n any) bool {
		buyers++
		if n := n.(*atomic.Int32).Load(); n != 1 {
			t.Errorf("the handler of %s ran %d times", b, n)
		}
		return true
	})
	if int64(buyers) != ran {
		t.Fatalf("handlers of %d buyers ran, %d runs in all: a handler ran twice for one request", buyers, ran)
	}
	if s.moves.Load() < int64(len(s.stock)) {
		t.Fatalf("handlers moved on %d times; every segment's exhaustion is found once at least", s.moves.Load())
	}
}

// TestHTTPSegments: a product's stock of 12 kept as 4 segments of 3, each
// sold under its own lock (lock.Segments(4)), on three instances, 60
// buyers at once. Each handler runs once and moves on in place
// (lock.NextSegment) while its segment is empty; the checker finds never
// two handlers inside one segment, exactly the stock sold, to 12 distinct
// buyers, each request's body read by its only run. The other 48 get 410
// (or 409, busy). Then every instance answers 410 without the handler and
// without a command to Redis; the gates of the product and of its 4
// segments are listed. On every deployment.
func TestHTTPSegments(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		const segments, perSegment, buyers = 4, 3, 60
		prefix := redistest.Prefix(t)
		s := newSegStock(segments, perSegment)
		var ran atomic.Int64
		build := func(a *app) http.Handler {
			r := chi.NewRouter()
			r.With(a.locker.ByParam("productID", lock.Segments(segments), lock.Wait(20*time.Second))).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
				ran.Add(1)
				body, err := io.ReadAll(r.Body)
				if err != nil || string(body) != r.Header.Get("X-Buyer") {
					t.Errorf("body %q (%v), want the buyer %q", body, err, r.Header.Get("X-Buyer"))
				}
				seg, err := s.buy(t, r.Context(), string(body))
				if err != nil {
					middleware.Error(w, r, err)
					return
				}
				fmt.Fprintf(w, "bought from segment %d", seg)
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
		buy := func(a *app, buyer string) result {
			return do(t, hc, "POST", a.srv.URL+"/products/42/buy", strings.NewReader(buyer), "X-Buyer", buyer)
		}

		var wg sync.WaitGroup
		var ok, gone, busy atomic.Int64
		for i := range buyers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch res := buy(apps[i%3], "buyer-"+strconv.Itoa(i)); res.status {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusGone:
					gone.Add(1)
				case http.StatusConflict:
					busy.Add(1)
				default:
					t.Errorf("purchase: %d %q", res.status, res.body)
				}
			}()
		}
		wg.Wait()
		s.check(t, ran.Load(), segments*perSegment)
		if ok.Load() != segments*perSegment || gone.Load()+busy.Load() != buyers-segments*perSegment {
			t.Fatalf("%d answered 200, %d 410, %d 409; want %d 200 and the rest 410 or 409", ok.Load(), gone.Load(), busy.Load(), segments*perSegment)
		}

		for i, a := range apps {
			eventually(t, 5*time.Second, "instance "+strconv.Itoa(i)+" refusing the sold-out product", func() bool {
				before := ran.Load()
				return buy(a, "late").status == http.StatusGone && ran.Load() == before
			})
		}
		runs := ran.Load()
		for i, a := range apps {
			before := trips[i].N()
			for range 20 {
				if res := buy(a, "late"); res.status != http.StatusGone {
					t.Fatalf("instance %d, sold-out product: %d %q, want 410", i, res.status, res.body)
				}
			}
			if n := trips[i].N() - before; n != 0 {
				t.Fatalf("instance %d sent %d commands to Redis for 20 requests for a sold-out product, want 0", i, n)
			}
		}
		if ran.Load() != runs {
			t.Fatalf("the handler ran %d times for a sold-out product", ran.Load()-runs)
		}

		gk := apps[0].locker.Operator().(lockcore.Gatekeeper)
		gates, err := gk.Gates(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, g := range gates {
			names = append(names, g.Key.String())
		}
		slices.Sort(names)
		want := []string{"productID:42", "productID:42 #0", "productID:42 #1", "productID:42 #2", "productID:42 #3"}
		if !slices.Equal(names, want) {
			t.Fatalf("gates %q, want %q", names, want)
		}
	})
}

// TestGRPCSegments is TestHTTPSegments over gRPC: three servers on
// loopback, each with its own Locker and Redis client, a rule with
// lock.Segments(4) on Reserve, 48 clients at once. Each handler runs once
// and moves on in place; exactly the stock is sold, never two handlers in
// one segment, and every call that got nothing ends with
// FailedPrecondition (sold out; interceptor.Status of NextSegment's
// error) or Aborted (busy). On every deployment.
func TestGRPCSegments(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		const segments, perSegment, clients = 4, 3, 48
		prefix := redistest.Prefix(t)
		s := newSegStock(segments, perSegment)
		var ran atomic.Int64
		srv := &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			ran.Add(1)
			md, _ := metadata.FromIncomingContext(ctx)
			buyer := md.Get("x-buyer")
			if len(buyer) != 1 {
				t.Errorf("x-buyer %q", buyer)
				return nil, status.Error(codes.InvalidArgument, "no buyer")
			}
			seg, err := s.buy(t, ctx, buyer[0])
			if err != nil {
				return nil, interceptor.Status(err)
			}
			return shop.Set(shop.New("ReserveReply"), "left", int64(seg)), nil
		}}
		opt := redisengine.Options{Prefix: prefix}
		if !b.Real() {
			// As in TestGRPCSeckill: miniredis under the race detector on a
			// busy machine may queue a burst of scripts past the default.
			opt.Timeout, opt.ReleaseTimeout = 10*time.Second, 10*time.Second
		}
		var conns []*grpc.ClientConn
		for range 3 {
			l := lock.NewRedis(clientOf(t, b), opt)
			t.Cleanup(func() { l.Close() })
			addr := serveGRPC(t, srv, grpc.ChainUnaryInterceptor(unaryServer(l,
				interceptor.Method(shop.Reserve, interceptor.Field("product_id"), lock.Segments(segments), lock.Wait(20*time.Second)))))
			conns = append(conns, dial(t, addr))
		}
		start := make(chan struct{})
		got := make(chan codes.Code, clients)
		var unexpected atomic.Value // an error of a code the test does not expect
		var wg sync.WaitGroup
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				ctx = metadata.AppendToOutgoingContext(ctx, "x-buyer", "buyer-"+strconv.Itoa(i))
				_, err := reserve(ctx, conns[i%len(conns)], 42)
				if c := status.Code(err); c != codes.OK && c != codes.FailedPrecondition && c != codes.Aborted {
					unexpected.Store(err.Error())
				}
				got <- status.Code(err)
			}()
		}
		close(start)
		wg.Wait()
		close(got)
		count := map[codes.Code]int{}
		for c := range got {
			count[c]++
		}
		s.check(t, ran.Load(), segments*perSegment)
		if count[codes.OK] != segments*perSegment || count[codes.FailedPrecondition]+count[codes.Aborted] != clients-segments*perSegment {
			t.Fatalf("codes %v (one other: %v); want %d OK and the rest FailedPrecondition or Aborted", count, unexpected.Load(), segments*perSegment)
		}
		// Every server knows (the gates reached it: on a Cluster, some
		// milliseconds after the last sale), then refuses from memory,
		// without the handler.
		late := metadata.AppendToOutgoingContext(context.Background(), "x-buyer", "late")
		for i, cc := range conns {
			eventually(t, 5*time.Second, "server "+strconv.Itoa(i)+" refusing the sold-out product", func() bool {
				before := ran.Load()
				_, err := reserve(late, cc, 42)
				return status.Code(err) == codes.FailedPrecondition && ran.Load() == before
			})
		}
		runs := ran.Load()
		for i, cc := range conns {
			for range 20 {
				if _, err := reserve(late, cc, 42); status.Code(err) != codes.FailedPrecondition {
					t.Fatalf("server %d, sold-out product: %v, want FailedPrecondition", i, err)
				}
			}
		}
		if n := ran.Load(); n != runs {
			t.Fatalf("the handler ran %d times for a sold-out product", n-runs)
		}
	})
}

// TestHTTPSegmentsRunAtOnce: two buyers of one product with two segments
// are inside their handlers at once (each waits for the other to enter);
// without segments the second waits for the first, which the test shows
// too.
func TestHTTPSegmentsRunAtOnce(t *testing.T) {
	b := redistest.Best(t)
	for _, segmented := range []bool{true, false} {
		t.Run(fmt.Sprint("segmented=", segmented), func(t *testing.T) {
			ps := []lifecycle.Policy{lock.Wait(2 * time.Second)}
			if segmented {
				ps = append(ps, lock.Segments(2))
			}
			entered := make(chan struct{}, 2)
			build := func(a *app) http.Handler {
				r := chi.NewRouter()
				r.With(a.locker.ByParam("productID", ps...)).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
					entered <- struct{}{}
					deadline := time.NewTimer(time.Second)
					defer deadline.Stop()
					for len(entered) < 2 {
						select {
						case <-deadline.C:
							http.Error(w, "alone", http.StatusTeapot)
							return
						case <-time.After(time.Millisecond): // polling the other's arrival, bounded
						}
					}
				})
				return r
			}
			a := newApp(t, b, redistest.Prefix(t), build)
			hc := httpClient(t, nil)
			res := make(chan int, 2)
			for range 2 {
				go func() { res <- do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil).status }()
			}
			s1, s2 := <-res, <-res
			together := s1 == http.StatusOK && s2 == http.StatusOK
			if together != segmented {
				t.Fatalf("statuses %d, %d: inside at once %v, want %v", s1, s2, together, segmented)
			}
		})
	}
}

// TestHTTPSegmentMoveFailFast: with FailFast a busy segment sends the
// buyer to the next free one, and 409 comes only when every open segment
// is busy; a handler that finds its segment exhausted while the other is
// busy gets the ContentionError from NextSegment (409), its segment's gate
// closed all the same; once no other segment is open, NextSegment's error
// answers 410; the handler runs once each time.
func TestHTTPSegmentMoveFailFast(t *testing.T) {
	b := redistest.Best(t)
	var runs atomic.Int64
	hold := make(chan struct{})
	held := make(chan int, 2)
	build := func(a *app) http.Handler {
		r := chi.NewRouter()
		r.With(a.locker.ByParam("productID", lock.Segments(2), lock.FailFast())).Post("/products/{productID}/{what}", func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			seg, _ := lock.Slot(r.Context())
			switch chi.URLParam(r, "what") {
			case "hold":
				held <- seg
				<-hold
			case "move":
				if err := lock.NextSegment(r.Context()); err != nil {
					middleware.Error(w, r, err)
					return
				}
				to, _ := lock.Slot(r.Context())
				fmt.Fprintf(w, "moved from %d to %d", seg, to)
			}
		})
		return r
	}
	a := newApp(t, b, redistest.Prefix(t), build)
	hc := httpClient(t, nil)
	url := a.srv.URL + "/products/42/"

	// Both segments held: the third buyer is refused at once.
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res := do(t, hc, "POST", url+"hold", nil); res.status != http.StatusOK {
				t.Errorf("holder: %d %q", res.status, res.body)
			}
		}()
	}
	s1, s2 := <-held, <-held
	if s1 == s2 {
		t.Fatalf("two fail-fast buyers both in segment %d", s1)
	}
	if res := do(t, hc, "POST", url+"other", nil); res.status != http.StatusConflict {
		t.Fatalf("with both segments busy: %d %q, want 409", res.status, res.body)
	}
	close(hold)
	wg.Wait()

	// One segment held, the buyer in the other moves on: busy, 409.
	hold = make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		if res := do(t, hc, "POST", url+"hold", nil); res.status != http.StatusOK {
			t.Errorf("holder: %d %q", res.status, res.body)
		}
	}()
	busySeg := <-held
	before := runs.Load()
	if res := do(t, hc, "POST", url+"move", nil); res.status != http.StatusConflict || runs.Load() != before+1 {
		t.Fatalf("moving on while the other segment is busy: %d %q, run %d times; want 409, once", res.status, res.body, runs.Load()-before)
	}
	close(hold)
	wg.Wait()
	gk := a.locker.Operator().(lockcore.Gatekeeper)
	gates, err := gk.Gates(context.Background())
	if err != nil || len(gates) != 1 || gates[0].Key != lifecycle.SegmentKey(key(t, "productID", "42"), 1-busySeg) {
		t.Fatalf("gates %+v %v, want the moving buyer's segment's", gates, err)
	}
	// The one open segment is the only one to take; there is nowhere to
	// move: 410, and the product closes.
	if res := do(t, hc, "POST", url+"move", nil); res.status != http.StatusGone {
		t.Fatalf("moving on from the last open segment: %d %q, want 410", res.status, res.body)
	}
	before = runs.Load()
	if res := do(t, hc, "POST", url+"other", nil); res.status != http.StatusGone || runs.Load() != before {
		t.Fatalf("every segment closed: %d %q, ran %d; want 410 without the handler", res.status, res.body, runs.Load()-before)
	}
}

// TestSegmentsMisused: NextSegment outside a segment, and Segments where
// it cannot apply, are refused with clear errors.
func TestSegmentsMisused(t *testing.T) {
	b := redistest.Best(t)
	build := func(a *app) http.Handler {
		r := chi.NewRouter()
		r.With(a.locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
			err := lock.NextSegment(r.Context())
			if !errors.Is(err, lockcore.ErrMisconfigured) {
				t.Errorf("NextSegment on an unsegmented route: %v, want ErrMisconfigured", err)
			}
			if _, ok := lock.Slot(r.Context()); ok {
				t.Error("lock.Slot reports a slot on an unsegmented route")
			}
		})
		return r
	}
	a := newApp(t, b, redistest.Prefix(t), build)
	if res := do(t, httpClient(t, nil), "POST", a.srv.URL+"/products/42/buy", nil); res.status != http.StatusOK {
		t.Fatalf("%d %q", res.status, res.body)
	}
	if err := lock.NextSegment(context.Background()); !errors.Is(err, lockcore.ErrInvalidKey) {
		t.Fatalf("NextSegment without a lock: %v", err)
	}
	for name, f := range map[string]func(){
		"Segments(0)":           func() { lock.Segments(0) },
		"Segments(257)":         func() { lock.Segments(257) },
		"Defaults(Segments)":    func() { lock.Defaults(lock.Segments(2)) },
		"Segments with Permits": func() { a.locker.ByParam("productID", lock.Segments(2), lock.Permits(2)) },
		"Segments with Also":    func() { a.locker.By(keyfunc.Param("productID").Also(keyfunc.Header("X-User")), lock.Segments(2)) },
		"Segments with Also on a gRPC method": func() {
			interceptor.Method("/shop.Inventory/Reserve", interceptor.Field("product_id").Also(interceptor.Field("quantity")), lock.Segments(2))
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
	if _, err := a.locker.Acquire(context.Background(), key(t, "productID", "1"), lock.Segments(2)); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("Acquire with Segments: %v, want ErrMisconfigured", err)
	}
}

// segmentRouter is a chi router on e whose handler, at POST
// /shop/products/{productID}/buy, sells from stock[segment] (moving on
// from an empty one), under a router-wide segmented lock and, with
// nested, the route's own lock on the same resource too.
func segmentRouter(e lifecycle.Locker, stock []int, nested bool, runs *atomic.Int64) http.Handler {
	mw := middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Segments: len(stock), Wait: time.Second}})
	r := chi.NewRouter()
	r.Use(mw)
	r.Route("/shop", func(r chi.Router) {
		if nested {
			r = r.With(mw)
		}
		r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			for {
				seg, ok := lock.Slot(r.Context())
				if !ok {
					http.Error(w, "no segment", http.StatusInternalServerError)
					return
				}
				if stock[seg] > 0 {
					stock[seg]--
					fmt.Fprintf(w, "bought %s from segment %d", chi.URLParam(r, "productID"), seg)
					return
				}
				if err := lock.NextSegment(r.Context()); err != nil {
					middleware.Error(w, r, err)
					return
				}
			}
		})
	})
	return r
}

// TestSegmentMovesThroughRouters: a request moves on twice, in place,
// through a router-wide lock and a mounted router, its handler run once;
// a nested lock on the same resource re-enters the request's segment, and
// the move takes both leases, which share one hold, to the new segment:
// afterwards the engine holds nothing.
func TestSegmentMovesThroughRouters(t *testing.T) {
	for _, nested := range []bool{false, true} {
		t.Run(fmt.Sprint("nested=", nested), func(t *testing.T) {
			e := &locktest.Engine{}
			var runs atomic.Int64
			stock := []int{0, 0, 0}
			srv := httptest.NewServer(segmentRouter(lifecycle.Serve(e, nil), stock, nested, &runs))
			defer srv.Close()
			k := key(t, "productID", "42")
			// The request's first segment is empty, and so is the next;
			// only the third has stock.
			// Where the turn starts: after this acquisition's segment.
			ls, err := lifecycle.AcquireSegment(context.Background(), lifecycle.Serve(e, nil), k, lifecycle.Policy{Segments: 3, Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			_, seg, _ := lifecycle.Segmented(ls.Key())
			_ = ls.Release(context.Background())
			first := (seg + 1) % 3
			stock[(first+2)%3] = 1
			res := do(t, httpClient(t, nil), "POST", srv.URL+"/shop/products/42/buy", nil)
			if res.status != http.StatusOK || res.body != fmt.Sprintf("bought 42 from segment %d", (first+2)%3) || runs.Load() != 1 {
				t.Fatalf("%d %q after %d runs; want 200 bought 42 from segment %d after 1", res.status, res.body, runs.Load(), (first+2)%3)
			}
			if infos, _, _ := e.List(context.Background(), "", 10); len(infos) != 0 {
				t.Fatalf("held after the request: %+v", infos)
			}
			res = do(t, httpClient(t, nil), "POST", srv.URL+"/shop/products/42/buy", nil)
			if res.status != http.StatusGone {
				t.Fatalf("sold out: %d %q, want 410", res.status, res.body)
			}
		})
	}
}

// TestSegmentMoveKeepsRequest: a request moves on in place whatever its
// body and whatever a middleware inside the lock did to it: its handler,
// run once, reads a body of more than 1 MiB, moves on twice, and answers
// with what it read, the headers it set and the route's parameters, under
// the same context.
func TestSegmentMoveKeepsRequest(t *testing.T) {
	e := &locktest.Engine{}
	var runs atomic.Int64
	r := chi.NewRouter()
	seg := middleware.Lock(lifecycle.Serve(e, nil), middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Segments: 3}})
	r.With(seg).Route("/products/{productID}", func(r chi.Router) {
		r.Use(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Auth") != "secret" {
					http.Error(w, "no auth", http.StatusUnauthorized)
					return
				}
				r.Header.Del("X-Auth") // as an auth middleware may
				next.ServeHTTP(w, r)
			})
		})
		r.Post("/{size}/{color}", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Set-Cookie", "run="+strconv.FormatInt(runs.Add(1), 10))
			body, _ := io.ReadAll(r.Body)
			ctx := r.Context()
			var segs []int
			for range 2 {
				s, _ := lock.Slot(ctx)
				segs = append(segs, s)
				if err := lock.NextSegment(ctx); err != nil {
					middleware.Error(w, r, err)
					return
				}
			}
			s, _ := lock.Slot(ctx)
			if ctx.Err() != nil || slices.Contains(segs, s) {
				t.Errorf("after two moves from %v: segment %d, context %v", segs, s, context.Cause(ctx))
			}
			fmt.Fprintf(w, "%s %s %d", chi.URLParam(r, "size"), chi.URLParam(r, "color"), len(body))
		})
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	res := do(t, httpClient(t, nil), "POST", srv.URL+"/products/42/L/red", strings.NewReader(strings.Repeat("x", 1<<20+1)), "X-Auth", "secret")
	if want := fmt.Sprintf("L red %d", 1<<20+1); res.status != http.StatusOK || res.body != want || runs.Load() != 1 {
		t.Fatalf("%d %q after %d runs, want 200 %q after 1", res.status, res.body, runs.Load(), want)
	}
	if c := res.header.Values("Set-Cookie"); !slices.Equal(c, []string{"run=1"}) {
		t.Fatalf("Set-Cookie %q, want the one run's", c)
	}
	if infos, _, _ := e.List(context.Background(), "", 10); len(infos) != 0 {
		t.Fatalf("held after the request: %+v", infos)
	}
}

// TestGRPCStreamSegments: a stream rule with lock.Segments takes a segment
// once the first message names the resource; its handler moves on in
// place (the stream's context keeps going, in the other segment), and
// when no segment is left ends the call with interceptor.Status of
// NextSegment's error: FailedPrecondition.
func TestGRPCStreamSegments(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer l.Close()
	type seen struct {
		before, after int
		moved         error
	}
	seenc := make(chan seen, 1)
	srv := &shop.Server{Restock: func(ss grpc.ServerStream) error {
		if err := ss.RecvMsg(shop.New("ReserveRequest")); err != nil {
			return err
		}
		ctx := ss.Context()
		var s seen
		s.before, _ = lock.Slot(ctx)
		s.moved = lock.NextSegment(ctx)
		s.after, _ = lock.Slot(ctx)
		seenc <- s
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return interceptor.Status(lock.NextSegment(ctx))
	}}
	cc := dial(t, serveGRPC(t, srv, grpc.ChainStreamInterceptor(streamServer(l,
		interceptor.Method(shop.Restock, interceptor.Field("product_id"), lock.Segments(2), lock.FailFast())))))
	st, err := cc.NewStream(context.Background(), shop.RestockDesc, shop.Restock)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(shop.Set(shop.New("ReserveRequest"), "product_id", int64(42), "quantity", int32(1))); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	err = st.RecvMsg(shop.New("ReserveReply"))
	s := <-seenc
	if s.moved != nil || s.before == s.after {
		t.Fatalf("the stream's move: %v, from segment %d to %d", s.moved, s.before, s.after)
	}
	wantCode(t, err, codes.FailedPrecondition)
}
