package lock_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestMalformedRedisURLFailsAtStartup: with no Locker set, a REDIS_URL that
// is not a Redis URL stops the program where the package-level route is
// built, with a message that shows the expected form and never the value
// (which may hold a password); before, every request panicked instead. A
// Locker set before the routes makes REDIS_URL irrelevant.
func TestMalformedRedisURLFailsAtStartup(t *testing.T) {
	lock.SetDefault(nil)
	t.Cleanup(func() { lock.SetDefault(nil) })
	for _, u := range []string{"localhost:16501", "redis://:s3cret pass@localhost:6379/0", "redis://localhost:6379/notadb"} {
		t.Setenv("REDIS_URL", u)
		func() {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.Contains(msg, "redis://[user:password@]host:6379/0") {
					t.Errorf("REDIS_URL=%q: building a route panicked with %v, want the expected form", u, r)
				}
				if strings.Contains(msg, "s3cret") {
					t.Errorf("the message repeats the password: %s", msg)
				}
			}()
			lock.ByParam("productID")
		}()
	}

	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	l := lock.New(rdb)
	t.Cleanup(func() { _ = l.Close() })
	lock.SetDefault(l)
	t.Setenv("REDIS_URL", "localhost:16501")
	lock.ByParam("productID") // no panic: the Locker set is used
}

// TestEtcdEndpointsFailsAtStartup: with no Locker set, ETCD_ENDPOINTS in a
// program that does not link the etcd engine stops the program where the
// package-level route is built, saying what to import; set together with
// a REDIS_ variable, the message names both variables. Neither repeats a
// value.
func TestEtcdEndpointsFailsAtStartup(t *testing.T) {
	lock.SetDefault(nil)
	t.Cleanup(func() { lock.SetDefault(nil) })
	for _, v := range []string{"REDIS_URL", "REDIS_CLUSTER_URL", "REDIS_SENTINEL_URL"} {
		t.Setenv(v, "")
	}
	panicOf := func() string {
		var msg string
		func() {
			defer func() { msg, _ = recover().(string) }()
			lock.ByParam("productID")
		}()
		return msg
	}
	const secret = "http://user:s3cret@127.0.0.1:2379"
	t.Setenv("ETCD_ENDPOINTS", secret)
	msg := panicOf()
	if !strings.Contains(msg, "ETCD_ENDPOINTS") || !strings.Contains(msg, `import _ "github.com/routelock/lock/etcdengine"`) || strings.Contains(msg, "s3cret") || strings.Contains(msg, "127.0.0.1") {
		t.Errorf("ETCD_ENDPOINTS without the etcd engine: building a route panicked with %q, want the import to add, and no value", msg)
	}
	for _, v := range []string{"REDIS_URL", "REDIS_CLUSTER_URL", "REDIS_SENTINEL_URL"} {
		t.Setenv(v, "redis://:s3cret@127.0.0.1:6379")
		msg := panicOf()
		if !strings.Contains(msg, "ETCD_ENDPOINTS and "+v+" are both set") || strings.Contains(msg, "s3cret") || strings.Contains(msg, "127.0.0.1") {
			t.Errorf("ETCD_ENDPOINTS and %s: building a route panicked with %q, want both named, and no value", v, msg)
		}
		t.Setenv(v, "")
	}
}

// TestMisspeltParamFailsClosed: a lock on one route whose pattern does not
// name its parameter (productId on {productID}) used to run the handler
// unlocked (200). It now answers 500, never runs the handler, and the
// Locker's logger hears of it once, with the route and the key function;
// a router's own r.Use still passes a route without the parameter.
func TestMisspeltParamFailsClosed(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	var logged syncBuffer
	locker := lock.New(rdb, lock.Logger(slog.New(slog.NewTextHandler(&logged, nil))))
	t.Cleanup(func() { _ = locker.Close() })

	var ran atomic.Int32
	h := func(http.ResponseWriter, *http.Request) { ran.Add(1) }
	r := chi.NewRouter()
	r.Use(locker.ByParam("productID")) // router-wide: /health passes
	r.Get("/health", h)
	r.With(locker.ByParam("productId")).Post("/products/{productID}/buy", h)
	r.Group(func(r chi.Router) {
		r.Use(locker.ByParam("userID"))
		r.Post("/users/{userId}/checkout", h)
	})
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	hc := &http.Client{Timeout: 10 * time.Second}
	ctx := context.Background()

	for i := 0; i < 3; i++ {
		for _, path := range []string{"/products/xyzzy-42/buy", "/users/plugh-7/checkout"} {
			if code, err := post(ctx, hc, hs.URL+path); err != nil || code != http.StatusInternalServerError {
				t.Fatalf("POST %s: %d %v, want 500", path, code, err)
			}
		}
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("the handler ran %d times on misconfigured routes", n)
	}
	resp, err := hc.Get(hs.URL + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/health under a router-wide lock: %v %v", resp, err)
	}
	resp.Body.Close()
	log := logged.String()
	if n := strings.Count(log, "does not name its key"); n != 2 {
		t.Fatalf("logged %d lines, want one per misconfigured route: %s", n, log)
	}
	for _, want := range []string{"/products/{productID}/buy", "Param(productId)", "/users/{userId}/checkout", "Param(userID)"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not name %s: %s", want, log)
		}
	}
	// Values no log line's time or other field can contain by chance.
	if strings.Contains(log, "xyzzy") || strings.Contains(log, "plugh") {
		t.Errorf("the log repeats a request value: %s", log)
	}
}

// TestDefaultSaysWhichRedis: without SetDefault, the package-level helpers
// make a Locker of their own on REDIS_URL; making it tells slog.Default,
// once, which Redis (address and database) and that SetDefault was not
// called, and never the password REDIS_URL holds.
func TestDefaultSaysWhichRedis(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.RequireAuth("s3cretpw")
	var logged syncBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	t.Setenv("REDIS_URL", "redis://:s3cretpw@"+mr.Addr()+"/3")
	lock.SetDefault(nil)
	t.Cleanup(func() { lock.SetDefault(nil) })

	r := chi.NewRouter()
	r.Use(lock.ByParam("productID"))
	var keys []string
	r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) { keys = lock.Keys(r.Context()) })
	for range 3 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("POST", "/products/42/buy", nil))
		if w.Code != http.StatusOK || len(keys) != 1 {
			t.Fatalf("%d %q, keys %q", w.Code, w.Body.String(), keys)
		}
	}
	log := logged.String()
	if n := strings.Count(log, "SetDefault was not called"); n != 1 {
		t.Fatalf("logged %d times that SetDefault was not called, want once: %s", n, log)
	}
	if !strings.Contains(log, `redis="`+mr.Addr()+` db 3"`) {
		t.Errorf("the log does not say which Redis (%s, database 3): %s", mr.Addr(), log)
	}
	if strings.Contains(log, "s3cretpw") {
		t.Errorf("the log repeats the password: %s", log)
	}
}

// TestRestartGuardSaysSo: a Locker at its defaults (and Defaults' TTL of
// 1 s) on a redis-server that has just started without an append-only
// file, as docker's image and Debian's package start it. Its restart guard
// refuses every lock for the engine's MaxTTL (30 s) after the start: nobody
// holds the lock, so a fail-fast request and a waiting one whose wait is
// shorter than the guard are answered at once 503 with Retry-After = the
// guard's time left in whole seconds, rounded up, not 409 "held by another
// owner" (after the wait); a gRPC call is answered Unavailable; the
// Locker's logger says so once, whatever the number of requests.
func TestRestartGuardSaysSo(t *testing.T) {
	srv := redistest.OwnVolatile(t)
	if srv == nil {
		return
	}
	var buf syncBuffer
	locker := lock.New(client(t, srv.Addr), lock.Defaults(lock.TTL(time.Second)),
		lock.Logger(slog.New(slog.NewTextHandler(&buf, nil))))
	t.Cleanup(func() { _ = locker.Close() })
	eng := locker.Backend().(*redisengine.Engine)
	r := chi.NewRouter()
	ran := atomic.Int32{}
	h := func(http.ResponseWriter, *http.Request) { ran.Add(1) }
	r.With(locker.ByParam("productID", lock.FailFast())).Post("/products/{productID}/buy", h)
	r.With(locker.ByParam("productID", lock.Wait(2*time.Second))).Post("/products/{productID}/wait", h)
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	c := httpClient(t, nil)

	for i, path := range []string{"/products/42/buy", "/products/42/wait", "/products/43/buy", "/products/43/wait"} {
		start := time.Now()
		res := do(t, c, "POST", hs.URL+path, nil)
		took := time.Since(start)
		left, err := eng.RestartGuard(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.status != http.StatusServiceUnavailable {
			t.Fatalf("request %d, %s on a server just started: %d %q after %v; want 503 while the restart guard lasts (%v more)",
				i, path, res.status, strings.TrimSpace(res.body), took.Round(time.Millisecond), left)
		}
		if took > time.Second {
			t.Errorf("%s answered after %v: the guard outlasts the wait, so it is answered at once", path, took.Round(time.Millisecond))
		}
		// The guard's time left, read after the answer: Retry-After is it
		// rounded up, as it was when the request was refused.
		lo, hi := int((left+time.Second-1)/time.Second), int((left+took+time.Second-1)/time.Second)
		if ra, err := strconv.Atoi(res.header.Get("Retry-After")); err != nil || ra < lo || ra > hi {
			t.Fatalf("%s: Retry-After %q; want the guard's %v left in seconds, rounded up (%d to %d)", path, res.header.Get("Retry-After"), left, lo, hi)
		}
		if !strings.Contains(res.body, "restart") {
			t.Errorf("%s: body %q does not say the lock service restarted", path, res.body)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("the handler ran %d times while the restart guard refused", n)
	}

	// gRPC, on the same Locker.
	addr := serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		ran.Add(1)
		return shop.New("ReserveReply"), nil
	}}, grpc.ChainUnaryInterceptor(unaryServer(locker,
		interceptor.Method(shop.Reserve, interceptor.Field("product_id"), lock.FailFast()))))
	_, err := reserve(context.Background(), dial(t, addr), 42)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("gRPC call while the restart guard lasts: %v; want Unavailable", err)
	}
	var ri *errdetails.RetryInfo
	for _, d := range status.Convert(err).Details() {
		if d, ok := d.(*errdetails.RetryInfo); ok {
			ri = d
		}
	}
	if ri == nil || ri.RetryDelay.AsDuration() <= 0 || ri.RetryDelay.AsDuration() > 30*time.Second {
		t.Errorf("gRPC Unavailable for the restart guard carries RetryInfo %v; want the guard's time left", ri)
	}

	if n := strings.Count(buf.String(), "restart guard"); n != 1 {
		t.Fatalf("the logger said %d lines of the restart guard for 5 refusals, want 1:\n%s", n, buf.String())
	}
	t.Logf("logged: %s", strings.TrimSpace(buf.String()))
}

// TestDefaultLockerOnEveryDeployment: the package-level helpers reach a
// Redis Cluster through REDIS_CLUSTER_URL and a master behind Sentinel
// through REDIS_SENTINEL_URL as they reach one server through REDIS_URL:
// a request's lock is held in that deployment (another Locker on it finds
// the key taken) while its handler runs, and gone after.
func TestDefaultLockerOnEveryDeployment(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		if !b.Real() {
			return // REDIS_URL on miniredis: TestDefaultSaysWhichRedis
		}
		for _, v := range []string{"REDIS_URL", "REDIS_CLUSTER_URL", "REDIS_SENTINEL_URL"} {
			t.Setenv(v, "")
		}
		name, value := b.Env()
		t.Setenv(name, value)
		lock.SetDefault(nil)
		t.Cleanup(func() { lock.SetDefault(nil) })
		other := lock.NewRedis(b.Universal(t), redisengine.Options{}, lock.Defaults(lock.FailFast()))
		t.Cleanup(func() { other.Close() })
		id := strings.ReplaceAll(redistest.Prefix(t), ":", "-")
		k, err := lockcore.NewKey("productID", id)
		if err != nil {
			t.Fatal(err)
		}
		held := make(chan error, 1)
		r := chi.NewRouter()
		r.With(lock.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
			// Not the request's context, whose owner token would re-enter.
			ls, err := other.Acquire(context.Background(), k, lifecycle.Policy{Wait: lockcore.FailFast})
			if err == nil {
				_ = ls.Release(context.Background())
			}
			held <- err
		})
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("POST", "/products/"+id+"/buy", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", name, w.Code, w.Body.String())
		}
		if err := <-held; !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Fatalf("%s: another Locker on the deployment took the key while the handler ran: %v", name, err)
		}
		ls, err := other.Acquire(context.Background(), k, lifecycle.Policy{Wait: time.Second})
		if err != nil {
			t.Fatalf("%s: the key is still held after the request: %v", name, err)
		}
		_ = ls.Release(context.Background())
	})
}

// TestMalformedDeploymentURLs: a REDIS_CLUSTER_URL or REDIS_SENTINEL_URL
// that cannot be parsed, one without a master name, and two variables set
// at once stop the program where the route is built, with the expected
// forms and never the password.
func TestMalformedDeploymentURLs(t *testing.T) {
	lock.SetDefault(nil)
	t.Cleanup(func() { lock.SetDefault(nil) })
	for _, c := range []struct{ env map[string]string }{
		{map[string]string{"REDIS_CLUSTER_URL": "redis://:s3cret@h1:6379?addr=h2:6379&nosuch=1"}},
		{map[string]string{"REDIS_SENTINEL_URL": "redis://:s3cret@s1:26379?addr=s2:26379"}},
		{map[string]string{"REDIS_SENTINEL_URL": "redis://s1:26379?master_name=m&password=s3cret&nosuch=1"}},
		{map[string]string{"REDIS_URL": "redis://:s3cret@h:6379/0", "REDIS_CLUSTER_URL": "redis://:s3cret@h1:6379"}},
	} {
		for _, v := range []string{"REDIS_URL", "REDIS_CLUSTER_URL", "REDIS_SENTINEL_URL"} {
			t.Setenv(v, c.env[v])
		}
		func() {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, "REDIS_SENTINEL_URL=redis://") || !strings.Contains(msg, "master_name=") {
					t.Errorf("%v: building a route panicked with %q, want the expected forms", c.env, msg)
				}
				if strings.Contains(msg, "s3cret") {
					t.Errorf("%v: the message repeats the password: %s", c.env, msg)
				}
			}()
			lock.ByParam("productID")
		}()
	}
}

// TestNewRedisKeepsEngineLogger: the engine's own Logger given to
// NewRedis is kept when the Locker is given none: the engine says through
// it that Redis is out of reach.
func TestNewRedisKeepsEngineLogger(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var buf syncBuffer
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	locker := lock.NewRedis(rdb, redisengine.Options{Prefix: redistest.Prefix(t), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	t.Cleanup(func() { _ = locker.Close() })
	k, err := lockcore.NewKey("productID", "42")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := locker.Acquire(ctx, k, lock.FailFast()); !errors.Is(err, lockcore.ErrUnavailable) {
		t.Fatalf("Acquire with Redis out of reach: %v, want ErrUnavailable", err)
	}
	if !strings.Contains(buf.String(), "Redis unreachable") {
		t.Fatalf("the engine's own Logger heard nothing of Redis out of reach: %q", buf.String())
	}
}
