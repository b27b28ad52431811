package lock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/background"
	"github.com/routelock/lock/internal/keylimit"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/internal/redisconf"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// app is one instance of a service: its own Redis client, Locker and HTTP
// server on loopback.
type app struct {
	rdb    redis.UniversalClient
	locker *lock.Locker
	srv    *httptest.Server
}

// newApp starts an instance whose routes build makes. Lockers of one test
// share prefix, so instances of a test share their locks.
func newApp(t *testing.T, b *redistest.Backend, prefix string, build func(a *app) http.Handler, opts ...lock.Option) *app {
	t.Helper()
	return newAppOn(t, clientOf(t, b), prefix, build, opts...)
}

// newAppOn is newApp on client rdb.
func newAppOn(t *testing.T, rdb redis.UniversalClient, prefix string, build func(a *app) http.Handler, opts ...lock.Option) *app {
	t.Helper()
	return newAppWith(t, rdb, redisengine.Options{Prefix: prefix}, build, opts...)
}

// newAppWith is newAppOn with the engine's options eopt.
func newAppWith(t *testing.T, rdb redis.UniversalClient, eopt redisengine.Options, build func(a *app) http.Handler, opts ...lock.Option) *app {
	t.Helper()
	a := &app{rdb: rdb}
	a.locker = lock.NewRedis(a.rdb, eopt, opts...)
	a.srv = httptest.NewServer(build(a))
	t.Cleanup(func() {
		a.srv.Close()
		a.locker.Close()
	})
	return a
}

func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clientOf is client for any deployment of redistest.
func clientOf(t *testing.T, b *redistest.Backend) redis.UniversalClient {
	// miniredis runs scripts in an interpreter of Go, one at a time: under
	// the race detector a burst of them queues for seconds on a busy
	// machine, past a read timeout of one.
	rw := time.Second
	if !b.Real() {
		rw = 10 * time.Second
	}
	return b.UniversalWith(t, func(o *redisconf.Common) {
		*o.PoolSize, *o.MaxRetries = 64, -1
		*o.DialTimeout, *o.ReadTimeout, *o.WriteTimeout = 500*time.Millisecond, rw, rw
	})
}

// httpClient is a client for many concurrent requests to loopback servers.
func httpClient(t *testing.T, rt http.RoundTripper) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	t.Cleanup(tr.CloseIdleConnections)
	if rt == nil {
		rt = tr
	}
	return &http.Client{Transport: rt, Timeout: 60 * time.Second}
}

type result struct {
	status int
	body   string
	header http.Header
}

func do(t *testing.T, c *http.Client, method, url string, body io.Reader, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, string(b), resp.Header}
}

func key(t *testing.T, parts ...string) lockcore.Key {
	k, err := lockcore.NewKey(parts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// eventually polls cond until it holds, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

func inspect(t *testing.T, l *lock.Locker, k lockcore.Key) lockcore.Info {
	t.Helper()
	info, err := l.Operator().Inspect(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestSeckill is the flash sale: three instances of a shop, each with its
// own Locker and Redis client, sell 10 phones to 200 concurrent buyers with
// a handler that reads the stock, does other work, and writes it back. With
// the lock exactly 10 are sold; without it the same handler oversells.
// The three instances put the middleware in the three places chi allows: the
// router's Use, With on the route, and Use inside Route.
func TestSeckill(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		for _, locked := range []bool{true, false} {
			t.Run(fmt.Sprintf("locked=%v", locked), func(t *testing.T) {
				sold, stock := seckill(t, b, locked)
				t.Logf("sold %d, stock %d", sold, stock)
				if locked && (sold != 10 || stock != 0) {
					t.Fatalf("with the lock: sold %d, stock %d; want 10 and 0", sold, stock)
				}
				if !locked && sold <= 10 {
					t.Fatalf("without the lock the racy handler sold %d: the test does not show a race", sold)
				}
			})
		}
	})
}

// meetSecond returns the rendezvous of a racy buyer, called between reading
// the stock and writing it back: the first caller waits (up to 500ms) until
// a second one has read too. Without the lock two buyers are then sure to
// interleave instead of relying on the scheduler; with the lock the second
// read comes only after the first write, and only the first buyer waits.
func meetSecond() func() {
	met := make(chan struct{})
	var readers atomic.Int32
	return func() {
		if readers.Add(1) == 2 {
			close(met)
		}
		select {
		case <-met:
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func seckill(t *testing.T, b *redistest.Backend, locked bool) (sold, stock int64) {
	const buyers, initial = 200, 10
	prefix := redistest.Prefix(t)
	stockKey, soldKey, workKey := prefix+"stock", prefix+"sold", prefix+"work"
	meet := meetSecond()
	buy := func(rdb redis.UniversalClient) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			n, err := rdb.Get(ctx, stockKey).Int64()
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			if n <= 0 {
				http.Error(w, "sold out", http.StatusGone)
				return
			}
			meet()
			rdb.Incr(ctx, workKey) // the payment call between read and write
			if err := rdb.Set(ctx, stockKey, n-1, 0).Err(); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			rdb.Incr(ctx, soldKey)
		}
	}
	wait := lock.Wait(30 * time.Second)
	builds := []func(a *app) http.Handler{
		func(a *app) http.Handler {
			r := chi.NewRouter()
			if locked {
				r.Use(a.locker.ByParam("productID", wait))
			}
			r.Post("/products/{productID}/buy", buy(a.rdb))
			return r
		},
		func(a *app) http.Handler {
			r := chi.NewRouter()
			if locked {
				r.With(a.locker.ByParam("productID", wait)).Post("/products/{productID}/buy", buy(a.rdb))
			} else {
				r.Post("/products/{productID}/buy", buy(a.rdb))
			}
			return r
		},
		func(a *app) http.Handler {
			r := chi.NewRouter()
			r.Route("/products/{productID}", func(r chi.Router) {
				if locked {
					r.Use(a.locker.ByParam("productID", wait))
				}
				r.Post("/buy", buy(a.rdb))
			})
			return r
		},
	}
	var apps []*app
	for _, build := range builds {
		// A Timeout of 5 s, not 1: the sale judges exclusion, and on an
		// embedded server starved by the race detector and the other test
		// binaries CI runs beside it, an answer can take over a second
		// (503, seen once in CI).
		apps = append(apps, newAppWith(t, clientOf(t, b), redisengine.Options{Prefix: prefix, Timeout: 5 * time.Second}, build))
	}
	if err := apps[0].rdb.Set(context.Background(), stockKey, initial, 0).Err(); err != nil {
		t.Fatal(err)
	}

	hc := httpClient(t, nil)
	start := make(chan struct{})
	statuses := make(chan int, buyers)
	var wg sync.WaitGroup
	for i := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := hc.Post(apps[i%len(apps)].srv.URL+"/products/42/buy", "", nil)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	close(start)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	ctx := context.Background()
	sold, _ = apps[0].rdb.Get(ctx, soldKey).Int64()
	stock, _ = apps[0].rdb.Get(ctx, stockKey).Int64()
	if locked {
		if count[200] != initial || count[http.StatusGone] != buyers-initial {
			t.Fatalf("statuses %v, want %d × 200 and %d × 410", count, initial, buyers-initial)
		}
		if info := inspect(t, apps[0].locker, key(t, "productID", "42")); (len(info.Holders) > 0) || len(info.Waiters) != 0 {
			t.Fatalf("lock left behind: %+v", info)
		}
	}
	return sold, stock
}

// holdFor takes productID:42 with another Locker, as another service would.
func holdFor(t *testing.T, b *redistest.Backend, prefix string) (*lifecycle.Lease, *lock.Locker) {
	t.Helper()
	other := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix})
	t.Cleanup(func() { other.Close() })
	ls, err := other.Acquire(context.Background(), key(t, "productID", "42"), lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	return ls, other
}

// TestContention: fail-fast answers 409 with Retry-After while the lock is
// still held; a blocking route waits and runs once the holder releases; a
// wait that runs out is a 409 too. The handler never runs without the lock.
func TestContention(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		var ran atomic.Int32
		var holderDone atomic.Bool
		handler := func(w http.ResponseWriter, r *http.Request) {
			ran.Add(1)
			if !holderDone.Load() {
				t.Error("handler ran while another owner held the lock")
			}
		}
		a := newApp(t, b, prefix, func(a *app) http.Handler {
			r := chi.NewRouter()
			r.With(a.locker.ByParam("productID", lock.FailFast())).Post("/products/{productID}/buy", handler)
			r.With(a.locker.ByParam("productID", lock.Wait(20*time.Second))).Post("/products/{productID}/wait", handler)
			r.With(a.locker.ByParam("productID", lock.Wait(100*time.Millisecond))).Post("/products/{productID}/short", handler)
			return r
		})
		hc := httpClient(t, nil)
		lease, other := holdFor(t, b, prefix)
		k := lease.Key()

		res := do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil)
		if res.status != http.StatusConflict {
			t.Fatalf("fail-fast while held: %d %q", res.status, res.body)
		}
		if ra, err := strconv.Atoi(res.header.Get("Retry-After")); err != nil || ra < 1 || ra > 10 {
			t.Fatalf("Retry-After %q, want 1..10 s", res.header.Get("Retry-After"))
		}
		if info := inspect(t, other, k); len(info.Holders) != 1 || info.Holders[0].Owner != operate.OwnerDigest(lease.Token()) || info.Holders[0].Count != 1 || len(info.Waiters) != 0 {
			t.Fatalf("after the 409 the lock is not as the holder left it: %+v", info)
		}
		if res := do(t, hc, "POST", a.srv.URL+"/products/42/short", nil); res.status != http.StatusConflict {
			t.Fatalf("wait ran out: %d %q", res.status, res.body)
		}

		got := make(chan result, 1)
		go func() { got <- do(t, hc, "POST", a.srv.URL+"/products/42/wait", nil) }()
		eventually(t, 10*time.Second, "the request queues for the lock", func() bool { return len(inspect(t, other, k).Waiters) == 1 })
		select {
		case res := <-got:
			t.Fatalf("blocking route answered %d while the lock was held", res.status)
		default:
		}
		holderDone.Store(true)
		if err := lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case res := <-got:
			if res.status != http.StatusOK {
				t.Fatalf("blocking route after release: %d %q", res.status, res.body)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("blocking route did not get the lock after the release")
		}
		if n := ran.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		if info := inspect(t, other, k); len(info.Holders) > 0 {
			t.Fatalf("lock left behind: %+v", info)
		}
		if res := do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil); res.status != http.StatusOK {
			t.Fatalf("fail-fast on a free lock: %d %q", res.status, res.body)
		}
	})
}

// TestCallerGoesAway: a client that gives up while its request waits leaves
// nothing behind: no waiter, and no hold once the holder releases.
func TestCallerGoesAway(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		var ran atomic.Bool
		a := newApp(t, b, prefix, func(a *app) http.Handler {
			r := chi.NewRouter()
			r.With(a.locker.ByParam("productID", lock.Wait(20*time.Second))).Post("/products/{productID}/buy",
				func(http.ResponseWriter, *http.Request) { ran.Store(true) })
			return r
		})
		lease, other := holdFor(t, b, prefix)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", a.srv.URL+"/products/42/buy", nil)
		errc := make(chan error, 1)
		go func() {
			resp, err := httpClient(t, nil).Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		eventually(t, 10*time.Second, "the request queues", func() bool { return len(inspect(t, other, lease.Key()).Waiters) == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("client: %v", err)
		}
		eventually(t, 10*time.Second, "the departed waiter is withdrawn", func() bool { return len(inspect(t, other, lease.Key()).Waiters) == 0 })
		if err := lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if info := inspect(t, other, lease.Key()); (len(info.Holders) > 0) || ran.Load() {
			t.Fatalf("after the caller left: %+v, handler ran %v", info, ran.Load())
		}
	})
}

// TestBadKey: a missing, oversized or ambiguous key is a 400 (an oversized
// JSON body a 413), the handler never runs, and nothing is locked.
func TestBadKey(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		var ran atomic.Int32
		h := func(w http.ResponseWriter, r *http.Request) { ran.Add(1) }
		a := newApp(t, b, redistest.Prefix(t), func(a *app) http.Handler {
			r := chi.NewRouter()
			r.With(a.locker.ByParam("productID")).Post("/products/{productID}/buy", h)
			r.With(a.locker.By(keyfunc.Join(keyfunc.Param("productID"), keyfunc.Header("X-User-ID")))).Post("/products/{productID}/cart", h)
			r.With(a.locker.By(keyfunc.JSONLimit("order.user_id", 1024))).Post("/orders", h)
			return r
		})
		hc := httpClient(t, nil)
		long := strings.Repeat("9", keylimit.PartLen+1)
		for _, tc := range []struct {
			name, path, body string
			hdr              []string
			status           int
			msg              string
		}{
			{"oversized param", "/products/" + long + "/buy", "", nil, 400, "Param(productID): longer than 256 bytes"},
			{"missing header", "/products/42/cart", "", nil, 400, "Header(X-User-Id): missing"},
			{"empty header", "/products/42/cart", "", []string{"X-User-ID", ""}, 400, "Header(X-User-Id): empty"},
			{"header twice", "/products/42/cart", "", []string{"X-User-ID", "a", "X-User-ID", "b"}, 400, "given 2 times"},
			{"JSON field missing", "/orders", `{"order":{}}`, nil, 400, "JSON(order.user_id): not found"},
			{"JSON not scalar", "/orders", `{"order":{"user_id":[1]}}`, nil, 400, "not a string, number or boolean"},
			{"JSON too large", "/orders", `{"order":{"user_id":"` + strings.Repeat("x", 2000) + `"}}`, nil, 413, "too large"},
			{"bad token", "/products/42/buy", "", []string{"Routelock-Token", "short"}, 400, "invalid Routelock-Token header"},
		} {
			res := do(t, hc, "POST", a.srv.URL+tc.path, strings.NewReader(tc.body), tc.hdr...)
			if res.status != tc.status || !strings.Contains(res.body, tc.msg) {
				t.Errorf("%s: %d %q, want %d with %q", tc.name, res.status, res.body, tc.status, tc.msg)
			}
			if strings.Contains(res.body, long) || strings.Contains(res.body, "xxxx") {
				t.Errorf("%s: body repeats the request's value", tc.name)
			}
		}
		if n := ran.Load(); n != 0 {
			t.Fatalf("handler ran %d times", n)
		}
		if n, _ := a.rdb.DBSize(context.Background()).Result(); b.Mini != nil && n != 0 {
			t.Fatalf("%d keys in Redis after refused requests", n)
		}
		// The same routes with good keys pass.
		for _, tc := range []struct{ path, body, user string }{{"/products/42/buy", "", ""}, {"/products/42/cart", "", "u7"}, {"/orders", `{"order":{"user_id":7}}`, ""}} {
			res := do(t, hc, "POST", a.srv.URL+tc.path, strings.NewReader(tc.body), "X-User-ID", tc.user)
			if tc.user == "" {
				res = do(t, hc, "POST", a.srv.URL+tc.path, strings.NewReader(tc.body))
			}
			if res.status != 200 {
				t.Errorf("%s: %d %q", tc.path, res.status, res.body)
			}
		}
	})
}

// TestRedisDown: with Redis stopped the middleware fails closed: 503, the
// handler does not run.
func TestRedisDown(t *testing.T) {
	redistest.Own(t, func(t *testing.T, addr string, stop func()) {
		var ran atomic.Int32
		a := newApp(t, redistest.At(addr), redistest.Prefix(t), func(a *app) http.Handler {
			r := chi.NewRouter()
			r.Use(a.locker.ByParam("productID"))
			r.Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) { ran.Add(1) })
			r.Get("/health", func(http.ResponseWriter, *http.Request) {})
			return r
		})
		hc := httpClient(t, nil)
		if res := do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil); res.status != 200 || ran.Load() != 1 {
			t.Fatalf("with Redis up: %d %q", res.status, res.body)
		}
		stop()
		res := do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil)
		if res.status != http.StatusServiceUnavailable || ran.Load() != 1 {
			t.Fatalf("with Redis down: %d %q, handler ran %d times", res.status, res.body, ran.Load())
		}
		if strings.Contains(res.body, "127.0.0.1") || strings.Contains(strings.ToLower(res.body), "dial") {
			t.Fatalf("503 body leaks the Redis error: %q", res.body)
		}
		// Routes without the resource do not need Redis.
		if res := do(t, hc, "GET", a.srv.URL+"/health", nil); res.status != 200 {
			t.Fatalf("/health with Redis down: %d", res.status)
		}
	})
}

// TestPanic: a panicking handler releases its lock and the panic goes on,
// to chi's Recoverer or to the caller of ServeHTTP.
func TestPanic(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		locker := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix})
		defer locker.Close()
		k := key(t, "productID", "42")
		boom := func(w http.ResponseWriter, r *http.Request) {
			if len(lock.Keys(r.Context())) != 1 {
				t.Error("handler runs without the lock")
			}
			panic("boom")
		}

		r := chi.NewRouter()
		r.Use(chimw.Recoverer)
		r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", boom)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("POST", "/products/42/buy", nil))
		if w.Code != 500 {
			t.Fatalf("Recoverer answered %d", w.Code)
		}
		if info := inspect(t, locker, k); len(info.Holders) > 0 {
			t.Fatalf("lock held after the panic: %+v", info)
		}

		bare := locker.ByParam("productID")(http.HandlerFunc(boom))
		mux := http.NewServeMux()
		mux.Handle("POST /products/{productID}/buy", bare)
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Fatalf("recovered %v, want the handler's panic", p)
				}
			}()
			mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/products/42/buy", nil))
			t.Fatal("panic did not go on")
		}()
		if info := inspect(t, locker, k); len(info.Holders) > 0 {
			t.Fatalf("lock held after the panic: %+v", info)
		}
	})
}

// TestLeaseLost: a lease that is lost while the handler runs cancels the
// handler's context with cause ErrLockLost.
func TestLeaseLost(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		a := newApp(t, b, prefix, func(a *app) http.Handler {
			r := chi.NewRouter()
			r.With(a.locker.ByParam("productID", lock.TTL(300*time.Millisecond))).Post("/products/{productID}/buy",
				func(w http.ResponseWriter, r *http.Request) {
					// Someone deletes the lock behind the holder's back.
					if err := a.rdb.Del(r.Context(), prefix+"{productID:42}").Err(); err != nil {
						t.Error(err)
					}
					select {
					case <-r.Context().Done():
						fmt.Fprint(w, errors.Is(context.Cause(r.Context()), lockcore.ErrLockLost))
					case <-time.After(5 * time.Second):
						fmt.Fprint(w, "not cancelled")
					}
				})
			return r
		})
		res := do(t, httpClient(t, nil), "POST", a.srv.URL+"/products/42/buy", nil)
		if res.body != "true" {
			t.Fatalf("handler saw %q, want its context cancelled with ErrLockLost", res.body)
		}
	})
}

// TestNestedReentry: service A holds productID:42 and calls service B, and
// itself, on routes that lock productID:42 too. With the owner token
// propagated by Transport the nested calls re-enter (count 2 in Redis, the
// same fencing token); without it they wait and time out with 409. Either
// way the key is gone when the outermost request returns.
func TestNestedReentry(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		k := key(t, "productID", "42")
		reserve := func(a **app) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				info := inspect(t, (*a).locker, k)
				fence, _ := lock.FencingToken(r.Context())
				var count int
				for _, h := range info.Holders {
					count = h.Count
				}
				fmt.Fprintf(w, "%d %d", fence, count)
			}
		}
		route := func(a **app) func(*app) http.Handler {
			return func(self *app) http.Handler {
				*a = self
				r := chi.NewRouter()
				r.Use(self.locker.ByParam("productID", lock.Wait(200*time.Millisecond)))
				r.Post("/products/{productID}/reserve", reserve(a))
				return r
			}
		}
		var svcB *app
		newApp(t, b, prefix, route(&svcB))

		for _, propagate := range []bool{true, false} {
			t.Run(fmt.Sprintf("propagate=%v", propagate), func(t *testing.T) {
				var svcA *app
				type call struct {
					Status int
					Body   string
				}
				type outcome struct {
					fence  int64
					nested []call
				}
				done := make(chan outcome, 1)
				newApp(t, b, prefix, func(a *app) http.Handler {
					svcA = a
					hc := httpClient(t, nil)
					if propagate {
						hc.Transport = middleware.Transport(hc.Transport)
					}
					r := chi.NewRouter()
					r.Use(a.locker.ByParam("productID", lock.Wait(200*time.Millisecond)))
					r.Post("/products/{productID}/reserve", reserve(&svcA))
					r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
						var o outcome
						defer func() { done <- o }()
						o.fence, _ = lock.FencingToken(r.Context())
						for _, url := range []string{svcB.srv.URL, svcA.srv.URL} {
							req, _ := http.NewRequestWithContext(r.Context(), "POST", url+"/products/42/reserve", nil)
							resp, err := hc.Do(req)
							if err != nil {
								t.Error(err)
								return
							}
							body, _ := io.ReadAll(resp.Body)
							resp.Body.Close()
							o.nested = append(o.nested, call{resp.StatusCode, string(body)})
						}
					})
					return r
				})
				res := do(t, httpClient(t, nil), "POST", svcA.srv.URL+"/products/42/buy", nil)
				o := <-done
				if res.status != 200 || len(o.nested) != 2 {
					t.Fatalf("outer request: %d %q, nested %v", res.status, res.body, o.nested)
				}
				for i, c := range o.nested {
					if propagate {
						if want := fmt.Sprintf("%d 2", o.fence); c.Status != 200 || c.Body != want {
							t.Errorf("nested call %d: %d %q, want 200 %q (same fence, count 2)", i, c.Status, c.Body, want)
						}
					} else if c.Status != http.StatusConflict {
						t.Errorf("nested call %d without the token: %d %q, want 409", i, c.Status, c.Body)
					}
				}
				if info := inspect(t, svcA.locker, k); len(info.Holders) > 0 {
					t.Fatalf("key left after the outermost request: %+v", info)
				}
			})
		}
	})
}

// TestTokenTrust: a request that may not carry a token is treated as a
// stranger even with the holder's token in hand.
func TestTokenTrust(t *testing.T) {
	b := redistest.Mini(t)
	prefix := redistest.Prefix(t)
	lease, _ := holdFor(t, b, prefix)
	internal := func(r *http.Request) bool { return r.Header.Get("X-Internal") == "yes" }
	build := func(a *app) http.Handler {
		r := chi.NewRouter()
		r.Use(middleware.Lock(a.locker, middleware.Config{Key: keyfunc.Param("productID"), Policy: lock.FailFast(), TrustToken: internal}))
		r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Routelock-Token") != "" {
				t.Error("the token header reached the handler")
			}
		})
		return r
	}
	a := newApp(t, b, prefix, build)
	hc := httpClient(t, nil)
	tok := lease.Token()
	if res := do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil, "Routelock-Token", tok); res.status != 409 {
		t.Fatalf("untrusted caller with the holder's token: %d, want 409", res.status)
	}
	if res := do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil, "Routelock-Token", tok, "X-Internal", "yes"); res.status != 200 {
		t.Fatalf("trusted caller with the holder's token: %d %q, want 200 (re-entry)", res.status, res.body)
	}
	if res := do(t, hc, "POST", a.srv.URL+"/products/42/buy", nil, "Routelock-Token", lifecycle.NewToken(), "X-Internal", "yes"); res.status != 409 {
		t.Fatalf("a token that holds nothing: %d, want 409", res.status)
	}
}

// TestTopLevelUse is the one-line contract: the package-level ByParam in
// the router's Use, the default Locker set after the routes are built.
// /health passes unlocked (and needs no Redis), the product route is locked.
func TestTopLevelUse(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		var keys [2][]string
		r := chi.NewRouter()
		r.Use(lock.ByParam("productID"))
		r.Get("/health", func(w http.ResponseWriter, r *http.Request) { keys[0] = lock.Keys(r.Context()) })
		r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) { keys[1] = lock.Keys(r.Context()) })

		rdb := clientOf(t, b)
		var commands atomic.Int64
		rdb.AddHook(counter{&commands})
		locker := lock.NewRedis(rdb, redisengine.Options{Prefix: redistest.Prefix(t)})
		lock.SetDefault(locker)
		t.Cleanup(func() {
			lock.SetDefault(nil)
			locker.Close()
		})

		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", "/health", nil))
		if w.Code != 200 || len(keys[0]) != 0 || commands.Load() != 0 {
			t.Fatalf("/health: %d, keys %q, %d Redis commands", w.Code, keys[0], commands.Load())
		}
		for range 2 { // the first loads the scripts
			commands.Store(0)
			w = httptest.NewRecorder()
			r.ServeHTTP(w, httptest.NewRequest("POST", "/products/42/buy", nil))
			if w.Code != 200 || len(keys[1]) != 1 || keys[1][0] != "productID:42" {
				t.Fatalf("/products/42/buy: %d, keys %q", w.Code, keys[1])
			}
		}
		if n := commands.Load(); n != 2 {
			t.Fatalf("%d round trips to Redis for one locked request, want 2 (acquire, release)", n)
		}
	})
}

type counter struct{ n *atomic.Int64 }

func (c counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "hello" && name != "client" && name != "subscribe" && name != "ping" && !background.Marked(ctx) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline of a script as one: on Sentinel an
// acquire goes with its WAIT for a replica (redisengine.Options.Replicas),
// in one round trip. Other pipelines (the engine's record for operators)
// are not a request's.
func (c counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !background.Marked(ctx) && slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool { return cmd.Name() == "evalsha" }) {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestServeMux: per-route middleware on a Go 1.22 ServeMux.
func TestServeMux(t *testing.T) {
	b := redistest.Mini(t)
	locker := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer locker.Close()
	var got []string
	mux := http.NewServeMux()
	mux.Handle("POST /products/{productID}/buy", locker.ByParam("productID")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = lock.Keys(r.Context())
	})))
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("POST", "/products/7/buy", nil))
	if w.Code != 200 || len(got) != 1 || got[0] != "productID:7" {
		t.Fatalf("%d, keys %q", w.Code, got)
	}
	// Around the whole mux the request is not routed yet: a loud 500, not
	// a silent pass.
	whole := locker.ByParam("productID")(mux)
	w = httptest.NewRecorder()
	whole.ServeHTTP(w, httptest.NewRequest("POST", "/products/7/buy", nil))
	if w.Code != 500 || !strings.Contains(w.Body.String(), "not routed") {
		t.Fatalf("middleware around the ServeMux: %d %q", w.Code, w.Body.String())
	}
}

// TestNameSharesLock: Name makes routes that spell a resource differently
// share its lock, and Keys reports it.
func TestNameSharesLock(t *testing.T) {
	b := redistest.Mini(t)
	prefix := redistest.Prefix(t)
	lease, _ := holdFor(t, b, prefix) // productID:42
	a := newApp(t, b, prefix, func(a *app) http.Handler {
		r := chi.NewRouter()
		r.With(a.locker.By(keyfunc.Param("pid").As("productID"), lock.FailFast())).Post("/p/{pid}", func(http.ResponseWriter, *http.Request) {})
		r.With(a.locker.ByParam("pid", lock.FailFast())).Post("/q/{pid}", func(http.ResponseWriter, *http.Request) {})
		return r
	})
	hc := httpClient(t, nil)
	if res := do(t, hc, "POST", a.srv.URL+"/p/42", nil); res.status != 409 {
		t.Fatalf("renamed route: %d, want 409 (shares productID:42)", res.status)
	}
	if res := do(t, hc, "POST", a.srv.URL+"/q/42", nil); res.status != 200 {
		t.Fatalf("pid:42: %d, want 200 (another resource)", res.status)
	}
	_ = lease
}

// TestOnError: the rejection response is replaceable, and gets the error.
func TestOnError(t *testing.T) {
	b := redistest.Mini(t)
	prefix := redistest.Prefix(t)
	holdFor(t, b, prefix)
	a := newApp(t, b, prefix, func(a *app) http.Handler {
		r := chi.NewRouter()
		r.With(middleware.Lock(a.locker, middleware.Config{Key: keyfunc.Param("productID"), Policy: lock.FailFast(), OnError: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, lockcore.ErrNotAcquired) {
				http.Error(w, "come back later", http.StatusTooManyRequests)
				return
			}
			http.Error(w, "other", 500)
		}})).Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) {})
		return r
	})
	if res := do(t, httpClient(t, nil), "POST", a.srv.URL+"/products/42/buy", nil); res.status != 429 || res.body != "come back later\n" {
		t.Fatalf("%d %q", res.status, res.body)
	}
}

// TestDefaultFromEnv: without SetDefault the package-level helpers connect
// to REDIS_URL.
func TestDefaultFromEnv(t *testing.T) {
	b := redistest.Mini(t)
	t.Setenv("REDIS_URL", "redis://"+b.Addr+"/0")
	lock.SetDefault(nil)
	t.Cleanup(func() { lock.SetDefault(nil) })
	r := chi.NewRouter()
	r.Use(lock.ByParam("productID"))
	var keys []string
	r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		keys = lock.Keys(r.Context())
		if !b.Mini.Exists("routelock:{productID:42}") {
			t.Error("the lock is not in the Redis REDIS_URL names")
		}
	})
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("POST", "/products/42/buy", nil))
	if w.Code != 200 || len(keys) != 1 {
		t.Fatalf("%d %q, keys %q", w.Code, w.Body.String(), keys)
	}
}

func TestOptionPanics(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	rpcOnly := keyfunc.Custom(keyfunc.Source{Name: "x", RPC: func(context.Context, any) (string, error) { return "", nil }})
	for name, fn := range map[string]func(){
		"Wait(0)":             func() { lock.Wait(0) },
		"TTL(1ms)":            func() { lock.TTL(time.Millisecond) },
		"bad Defaults":        func() { lock.Defaults(lifecycle.Policy{Wait: -2}) },
		"bad route Policy":    func() { lock.ByParam("id", lifecycle.Policy{TTL: -time.Second}) },
		"bad Prefix":          func() { lock.NewRedis(rdb, redisengine.Options{Prefix: "a{b"}) },
		"New(nil)":            func() { lock.New(nil) },
		"zero key":            func() { lock.By(keyfunc.Func{}) },
		"key not for HTTP":    func() { lock.By(rpcOnly) },
		"zero Option":         func() { lock.New(rdb, lock.Option{}) },
		"ByParam empty param": func() { lock.ByParam("") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			fn()
		}()
	}
}

// FuzzKeysDistinct: two requests get the same lock key exactly when their
// values name the same value (the same bytes, or two spellings of one
// integer or UUID), whatever bytes the values hold.
func FuzzKeysDistinct(f *testing.F) {
	f.Add("42", "u7", "42", "u7")
	f.Add("a:b", "c", "a", "b:c")
	f.Add("a%3Ab", "c", "a:b", "c")
	f.Add("x}", "{y", "x", "}{y")
	kf := keyfunc.Join(keyfunc.Header("X-A"), keyfunc.Header("X-B"))
	keyOf := func(a, b string) (string, bool) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["X-A"] = []string{a}
		r.Header["X-B"] = []string{b}
		parts, _, err := kf.HTTP(r)
		if err != nil {
			return "", false
		}
		k, err := lockcore.NewKey(parts...)
		if err != nil {
			panic(fmt.Sprintf("keyfunc accepted %q but lockcore refused: %v", parts, err))
		}
		if strings.ContainsAny(k.String(), "{}") {
			panic(fmt.Sprintf("key %q can change the cluster slot", k))
		}
		return k.String(), true
	}
	f.Fuzz(func(t *testing.T, a1, b1, a2, b2 string) {
		k1, ok1 := keyOf(a1, b1)
		k2, ok2 := keyOf(a2, b2)
		if !ok1 || !ok2 {
			return
		}
		if same := sameValue(a1, a2) && sameValue(b1, b2); same != (k1 == k2) {
			t.Fatalf("(%q,%q) → %q and (%q,%q) → %q", a1, b1, k1, a2, b2, k2)
		}
	})
}

// sameValue reports whether key values a and b name the same value: the
// same bytes, the same decimal integer (big.Int), or the same UUID in any
// letter case.
func sameValue(a, b string) bool {
	if a == b {
		return true
	}
	ia, oka := new(big.Int).SetString(strings.TrimPrefix(a, "+"), 10)
	ib, okb := new(big.Int).SetString(strings.TrimPrefix(b, "+"), 10)
	if oka && okb && !strings.ContainsAny(a+b, "_") && !strings.HasPrefix(a, "+-") && !strings.HasPrefix(b, "+-") {
		return ia.Cmp(ib) == 0
	}
	return uuidRE.MatchString(a) && strings.EqualFold(a, b)
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
