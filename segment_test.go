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

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/middleware"
)

// TestHTTPSegments: a product's stock of 12 kept as 4 segments of 3, each
// sold under its own lock (lock.Segments(4)), on three instances, 60
// buyers at once, each naming itself in its request's body. A checker
// counts the handlers inside each segment: never two. Exactly 3 are sold
// from each segment, 12 in all, to 12 distinct buyers, each read from the
// body of its own request also when the request moved on from an exhausted
// segment and its handler ran again. The other 48 get 410. Then every
// instance answers 410 without the handler and without a command to Redis;
// the gates of the product and of its 4 segments are listed. On every
// deployment.
func TestHTTPSegments(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		const segments, perSegment, buyers = 4, 3, 60
		prefix := redistest.Prefix(t)
		var (
			stock    [segments]int // guarded by the segment's lock
			inside   [segments]atomic.Int32
			soldTo   sync.Map // buyer → segment
			ran      atomic.Int64
			moved    atomic.Int64
			overlaps atomic.Int64
		)
		for i := range stock {
			stock[i] = perSegment
		}
		build := func(a *app) http.Handler {
			r := chi.NewRouter()
			r.With(a.locker.ByParam("productID", lock.Segments(segments), lock.Wait(20*time.Second))).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
				ran.Add(1)
				body, err := io.ReadAll(r.Body)
				if err != nil || string(body) != r.Header.Get("X-Buyer") {
					t.Errorf("body %q (%v), want the buyer %q", body, err, r.Header.Get("X-Buyer"))
				}
				seg, ok := lock.Segment(r.Context())
				if !ok || seg < 0 || seg >= segments {
					t.Errorf("lock.Segment = %d, %v", seg, ok)
					return
				}
				if inside[seg].Add(1) != 1 {
					overlaps.Add(1)
				}
				defer inside[seg].Add(-1)
				if stock[seg] == 0 {
					moved.Add(1)
					if err := lock.NextSegment(r.Context()); err != nil {
						t.Errorf("NextSegment: %v", err)
					}
					return
				}
				left := stock[seg]
				runtime.Gosched() // where a missing lock lets another buyer in
				stock[seg] = left - 1
				if _, dup := soldTo.LoadOrStore(string(body), seg); dup {
					t.Errorf("buyer %s bought twice", body)
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
		var ok, gone atomic.Int64
		for i := range buyers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch res := buy(apps[i%3], "buyer-"+strconv.Itoa(i)); res.status {
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
		if n := overlaps.Load(); n != 0 {
			t.Fatalf("%d times two handlers were inside one segment at once", n)
		}
		var sold int
		perSeg := map[int]int{}
		soldTo.Range(func(_, seg any) bool { sold++; perSeg[seg.(int)]++; return true })
		if ok.Load() != segments*perSegment || sold != segments*perSegment || gone.Load() != buyers-segments*perSegment {
			t.Fatalf("%d answered 200, %d sold, %d answered 410; want %d, %d, %d", ok.Load(), sold, gone.Load(), segments*perSegment, segments*perSegment, buyers-segments*perSegment)
		}
		for seg := range segments {
			if perSeg[seg] != perSegment || stock[seg] != 0 {
				t.Fatalf("segment %d: sold %d, left %d; want %d, 0", seg, perSeg[seg], stock[seg], perSegment)
			}
		}
		if moved.Load() < segments {
			t.Fatalf("handlers moved on %d times; every segment's exhaustion is found once at least", moved.Load())
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

// TestHTTPSegmentWrittenIsNotRunAgain: a handler that wrote its response
// and then asks to move on is not run again (its answer stands), and the
// segment's gate is closed all the same; with FailFast a busy segment
// sends the buyer to the next free one, and 409 comes only when every
// open segment is busy.
func TestHTTPSegmentWrittenIsNotRunAgain(t *testing.T) {
	b := redistest.Best(t)
	var runs atomic.Int64
	hold := make(chan struct{})
	held := make(chan int, 2)
	build := func(a *app) http.Handler {
		r := chi.NewRouter()
		r.With(a.locker.ByParam("productID", lock.Segments(2), lock.FailFast())).Post("/products/{productID}/{what}", func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			seg, _ := lock.Segment(r.Context())
			switch chi.URLParam(r, "what") {
			case "hold":
				held <- seg
				<-hold
			case "wrote":
				fmt.Fprint(w, "answered")
				if err := lock.NextSegment(r.Context()); err != nil {
					t.Errorf("NextSegment: %v", err)
				}
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

	before := runs.Load()
	res := do(t, hc, "POST", url+"wrote", nil)
	if res.status != http.StatusOK || res.body != "answered" || runs.Load() != before+1 {
		t.Fatalf("a handler that wrote and moved on: %d %q, run %d times; want 200 answered, once", res.status, res.body, runs.Load()-before)
	}
	gk := a.locker.Operator().(lockcore.Gatekeeper)
	gates, err := gk.Gates(context.Background())
	if err != nil || len(gates) != 1 {
		t.Fatalf("gates %+v %v, want the one segment's", gates, err)
	}
	if _, _, ok := gates[0].Key.Segmented(); !ok {
		t.Fatalf("gate of %v, want a segment's", gates[0].Key)
	}
	// The other segment still sells; then none is open.
	if res := do(t, hc, "POST", url+"other", nil); res.status != http.StatusOK {
		t.Fatalf("the open segment: %d %q", res.status, res.body)
	}
	if res := do(t, hc, "POST", url+"wrote", nil); res.status != http.StatusOK {
		t.Fatalf("%d %q", res.status, res.body)
	}
	if res := do(t, hc, "POST", url+"other", nil); res.status != http.StatusGone {
		t.Fatalf("every segment closed: %d %q, want 410", res.status, res.body)
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
			if _, ok := lock.Segment(r.Context()); ok {
				t.Error("lock.Segment reports a segment on an unsegmented route")
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
		"Segments on gRPC method": func() {
			interceptor.Method("/shop.Inventory/Reserve", interceptor.Field("product_id"), lock.Segments(2))
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
			w.Header().Add("X-Run", strconv.FormatInt(runs.Load(), 10))
			seg, ok := lock.Segment(r.Context())
			if !ok {
				http.Error(w, "no segment", http.StatusInternalServerError)
				return
			}
			if stock[seg] == 0 {
				if err := lock.NextSegment(r.Context()); err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
				}
				return
			}
			stock[seg]--
			fmt.Fprintf(w, "bought %s from segment %d", chi.URLParam(r, "productID"), seg)
		})
	})
	return r
}

// TestSegmentMovesThroughRouters: a request served again under another
// segment is routed as the first time, through a mounted router (chi's
// routing state put back), and answers with its last run's headers only;
// a nested lock on the same resource re-enters the request's segment and
// leaves the move to the outer one.
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
			_, seg, _ := ls.Key().Segmented()
			_ = ls.Release(context.Background())
			first := (seg + 1) % 3
			stock[(first+2)%3] = 1
			res := do(t, httpClient(t, nil), "POST", srv.URL+"/shop/products/42/buy", nil)
			if res.status != http.StatusOK || !strings.HasPrefix(res.body, "bought 42") || runs.Load() != 3 {
				t.Fatalf("%d %q after %d runs; want 200 bought 42 after 3", res.status, res.body, runs.Load())
			}
			if got := res.header.Values("X-Run"); !slices.Equal(got, []string{"3"}) {
				t.Fatalf("X-Run %q: headers of the abandoned runs were sent", got)
			}
			res = do(t, httpClient(t, nil), "POST", srv.URL+"/shop/products/42/buy", nil)
			if res.status != http.StatusGone {
				t.Fatalf("sold out: %d %q, want 410", res.status, res.body)
			}
		})
	}
}

// TestSegmentBodyReplay: a request moves on with its body read again
// whole; one whose handler read more of its body than the middleware
// keeps (1 MiB) cannot, and is answered 503, with nothing held.
func TestSegmentBodyReplay(t *testing.T) {
	e := &locktest.Engine{}
	r := chi.NewRouter()
	r.With(middleware.Lock(lifecycle.Serve(e, nil), middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Segments: 2}})).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if seg, _ := lock.Segment(r.Context()); seg == 0 || len(body) > 1<<20 {
			_ = lock.NextSegment(r.Context())
			return
		}
		fmt.Fprintf(w, "%d bytes", len(body))
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	hc := httpClient(t, nil)
	small := strings.Repeat("x", 1000)
	if res := do(t, hc, "POST", srv.URL+"/products/42/buy", strings.NewReader(small)); res.status != http.StatusOK || res.body != "1000 bytes" {
		t.Fatalf("small body: %d %q", res.status, res.body)
	}
	big := strings.Repeat("x", 1<<20+1)
	if res := do(t, hc, "POST", srv.URL+"/products/7/buy", strings.NewReader(big)); res.status != http.StatusServiceUnavailable {
		t.Fatalf("big body moved: %d %q, want 503", res.status, res.body)
	}
	if infos, _, _ := e.List(context.Background(), "", 10); len(infos) != 0 {
		t.Fatalf("held after the refusal: %+v", infos)
	}
}

// TestSegmentRerunState: a run served again begins with the request as the
// first run began with it, though a middleware inside the lock changed its
// header, and routes again through a router mounted after the lock with
// two parameters of its own; an answer of the middleware after a move (503
// for a body it cannot read again) carries none of the abandoned run's
// headers.
func TestSegmentRerunState(t *testing.T) {
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
			if runs.Load()%3 != 0 || len(body) > 1<<20 { // runs 1 and 2 move on
				_ = lock.NextSegment(r.Context())
				return
			}
			fmt.Fprintf(w, "%s %s %d", chi.URLParam(r, "size"), chi.URLParam(r, "color"), len(body))
		})
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	hc := httpClient(t, nil)
	res := do(t, hc, "POST", srv.URL+"/products/42/L/red", strings.NewReader("abc"), "X-Auth", "secret")
	if res.status != http.StatusOK || res.body != "L red 3" || runs.Load() != 3 {
		t.Fatalf("%d %q after %d runs, want 200 \"L red 3\" after 3", res.status, res.body, runs.Load())
	}
	if c := res.header.Values("Set-Cookie"); !slices.Equal(c, []string{"run=3"}) {
		t.Fatalf("Set-Cookie %q, want the last run's only", c)
	}
	runs.Store(2) // the next run asks to move on because of its body
	res = do(t, hc, "POST", srv.URL+"/products/7/L/red", strings.NewReader(strings.Repeat("x", 1<<20+1)), "X-Auth", "secret")
	if res.status != http.StatusServiceUnavailable || len(res.header.Values("Set-Cookie")) != 0 {
		t.Fatalf("a body that cannot be read again: %d, Set-Cookie %q; want 503 without", res.status, res.header.Values("Set-Cookie"))
	}
}
