package lock_test

// Promises that rest on the engine interface and the lease's context:
// printed contexts, streams locked on their first message, memory
// pressure, re-entry across Lockers on one engine, gRPC options from the
// Locker's defaults. Every test here uses go-redis's default client options
// and the library's defaults unless it says otherwise, and judges by what
// user code sees.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
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
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

const testBound = 5 * time.Second

// printings returns the ways a handler (or a logger, or a tracer) commonly
// prints a context: fmt's %v, %+v, %#v and %s.
func printings(ctx context.Context) map[string]string {
	return map[string]string{
		"%v":  fmt.Sprintf("%v", ctx),
		"%+v": fmt.Sprintf("%+v", ctx),
		"%#v": fmt.Sprintf("%#v", ctx),
		"%s":  fmt.Sprintf("%s", ctx),
	}
}

// TestPrintedContextLeaksNoToken: DESIGN says owner tokens are never
// echoed in responses, logs or telemetry. A handler that logs its context
// (log.Printf("%v", r.Context()), slog.Any("ctx", ctx), a tracer's debug
// dump) must not write the owner token of the lock it holds, over HTTP, a
// unary gRPC call, or a stream locked on its first message. Before the
// restructuring the lease's context was a context.WithValue, whose String
// method prints "WithValue(lockcore.ctxKey, <not Stringer>)"; now it is
// *lockcore.held, which has no String method, so fmt prints its fields.
func TestPrintedContextLeaksNoToken(t *testing.T) {
	b := redistest.Mini(t)
	prefix := redistest.Prefix(t)
	l := lock.NewRedis(defaultClient(t, b.Addr), redisengine.Options{Prefix: prefix})
	defer l.Close()

	type seen struct {
		where, token string
		prints       map[string]string
	}
	seenc := make(chan seen, 3)
	report := func(where string, ctx context.Context) {
		tok := innermostToken(ctx)
		seenc <- seen{where, tok, printings(ctx)}
	}

	// HTTP.
	r := chi.NewRouter()
	r.With(l.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		report("HTTP handler", r.Context())
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	if code, err := post(context.Background(), http.DefaultClient, srv.URL+"/products/42/buy"); err != nil || code != http.StatusOK {
		t.Fatalf("buy: %d %v", code, err)
	}

	// gRPC unary and stream.
	gsrv := &shop.Server{
		Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			report("unary handler", ctx)
			return shop.New("ReserveReply"), nil
		},
		Restock: func(ss grpc.ServerStream) error {
			if err := ss.RecvMsg(shop.New("ReserveRequest")); err != nil {
				return err
			}
			report("stream handler", ss.Context())
			return ss.SendMsg(shop.New("ReserveReply"))
		},
	}
	cc := dial(t, serveGRPC(t, gsrv,
		grpc.ChainUnaryInterceptor(unaryServer(l, interceptor.Method(shop.Reserve, interceptor.Field("product_id")))),
		grpc.ChainStreamInterceptor(streamServer(l, interceptor.Method(shop.Restock, interceptor.Field("product_id"))))))
	ctx, cancel := context.WithTimeout(context.Background(), testBound)
	defer cancel()
	if _, err := reserve(ctx, cc, 42); err != nil {
		t.Fatal(err)
	}
	st, err := cc.NewStream(ctx, shop.RestockDesc, shop.Restock)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(shop.Set(shop.New("ReserveRequest"), "product_id", int64(42))); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	if err := st.RecvMsg(shop.New("ReserveReply")); err != nil {
		t.Fatal(err)
	}

	for range 3 {
		s := <-seenc
		if s.token == "" {
			t.Errorf("%s: its context carries no owner token", s.where)
			continue
		}
		for verb, out := range s.prints {
			if strings.Contains(out, s.token) {
				i := strings.Index(out, s.token)
				lo := max(i-60, 0)
				t.Errorf("%s: fmt %s of the handler's context prints the owner token: …%s…", s.where, verb, out[lo:min(i+len(s.token)+10, len(out))])
			}
		}
	}
}

// TestOOMKeepsHeldLocks: a Redis 7 at its maxmemory with the default
// policy (noeviction) refuses commands that may grow memory, but not GET,
// PEXPIRE or DEL, which is all a renewal and an uncontended release run.
// A handler holding a lock keeps it, and its release frees it for the next
// request: renewals and releases carry allow-oom in their shebang. Without
// it, Redis refused them whole, the handler saw ErrLockLost although Redis
// was up and nobody else took the lock, and the next request got 409 until
// the TTL ran out. (Acquisitions are refused under OOM either way: 503.)
func TestOOMKeepsHeldLocks(t *testing.T) {
	srv := redistest.OwnReal(t)
	if srv == nil {
		return
	}
	prefix := redistest.Prefix(t)
	rdb := defaultClient(t, srv.Addr)
	admin := defaultClient(t, srv.Addr)
	const ttl = 300 * time.Millisecond
	l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix}, lock.Defaults(lock.TTL(ttl), lock.FailFast()))
	defer l.Close()

	ctx := context.Background()
	oom := func(on bool) {
		t.Helper()
		if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		v := "0"
		if on {
			v = "1" // below what the server uses: every deny-oom command is refused
		}
		if err := admin.ConfigSet(ctx, "maxmemory", v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = admin.ConfigSet(ctx, "maxmemory", "0").Err() })

	type outcome struct {
		lost  error
		fence int64
	}
	entered := make(chan struct{})
	proceed := make(chan struct{})
	outc := make(chan outcome, 1)
	r := chi.NewRouter()
	r.With(l.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		var o outcome
		o.fence, _ = lock.FencingToken(r.Context())
		select {
		case <-entered: // the next buy, after the first returned
			return
		default:
			close(entered)
		}
		<-proceed
		// Hold the lock through 4 TTLs of OOM: about 13 renewals.
		select {
		case <-r.Context().Done():
			o.lost = context.Cause(r.Context())
		case <-time.After(4 * ttl):
		}
		outc <- o
	})
	hs := httptest.NewServer(r)
	defer hs.Close()

	codec := make(chan int, 1)
	go func() {
		code, _ := post(ctx, http.DefaultClient, hs.URL+"/products/42/buy")
		codec <- code
	}()
	select {
	case <-entered:
	case <-time.After(testBound):
		t.Fatal("handler not entered")
	}
	if err := admin.Set(ctx, prefix+"ballast", strings.Repeat("x", 1<<16), 0).Err(); err != nil {
		t.Fatal(err)
	}
	oom(true)
	if err := admin.Set(ctx, prefix+"probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("server not out of memory: SET answered %v", err)
	}
	close(proceed)
	o := <-outc
	if o.lost != nil {
		t.Errorf("while Redis was at maxmemory (up, answering GET/PEXPIRE/DEL), the handler's context was cancelled: %v", o.lost)
	}
	if code := <-codec; code != http.StatusOK {
		t.Errorf("buy: %d", code)
	}
	// The handler returned: the lock must be free, even with Redis still
	// at maxmemory (DEL is not refused under OOM).
	info := inspect(t, l, key(t, "productID", "42"))
	if len(info.Holders) > 0 {
		t.Errorf("after the handler returned, the lock is still held in Redis (TTL %v): the release was refused", info.TTL)
	}
	oom(false)
	// What the next request sees, Redis healthy again.
	if code, err := post(ctx, http.DefaultClient, hs.URL+"/products/42/buy"); err == nil && code == http.StatusConflict {
		t.Errorf("the next buy after the first returned: 409, the released lock was still held")
	}
}

// TestSameEngineReentryAcrossLockers: in-memory re-entry is keyed by
// the engine: two Lockers on one engine (lock.FromEngine of one
// redisengine.New, twice) re-enter each other in memory (the hold keeps one entry in
// Redis), while a Locker from a second lock.New (same Redis, same prefix)
// re-enters through Redis with the owner token the context carries (two
// entries). All see the same fencing token, and the key is gone after the
// outermost handler.
func TestSameEngineReentryAcrossLockers(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		e, err := redisengine.New(b.Universal(t), redisengine.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		a := lock.FromEngine(e, lock.Defaults(lock.FailFast()))
		same := lock.FromEngine(e, lock.Defaults(lock.FailFast()))
		c := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: prefix}, lock.Defaults(lock.FailFast()))
		defer c.Close()
		k := key(t, "productID", "42")

		type inner struct {
			code    int
			fence   string
			holders []lockcore.Holder
		}
		nested := func(l *lock.Locker, ctx context.Context) inner {
			r := chi.NewRouter()
			var got inner
			r.With(l.ByParam("productID")).Post("/p/{productID}", func(w http.ResponseWriter, r *http.Request) {
				f, _ := lock.FencingToken(r.Context())
				got.fence = fmt.Sprint(f)
				got.holders = inspect(t, a, k).Holders
			})
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, httptest.NewRequest("POST", "/p/42", nil).WithContext(ctx))
			got.code = rec.Code
			return got
		}
		var outerFence string
		var viaSame, viaOther inner
		r := chi.NewRouter()
		r.With(a.ByParam("productID")).Post("/p/{productID}", func(w http.ResponseWriter, r *http.Request) {
			f, _ := lock.FencingToken(r.Context())
			outerFence = fmt.Sprint(f)
			viaSame = nested(same, r.Context())
			viaOther = nested(c, r.Context())
		})
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("POST", "/p/42", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("outer: %d", rec.Code)
		}
		count := func(hs []lockcore.Holder) (n int) {
			for _, h := range hs {
				n += h.Count
			}
			return n
		}
		if viaSame.code != http.StatusOK || viaSame.fence != outerFence || count(viaSame.holders) != 1 {
			t.Errorf("a second FromEngine(e) nested: %d fence %s (outer %s), entries %v: want 200, same fence, one entry (in memory)",
				viaSame.code, viaSame.fence, outerFence, viaSame.holders)
		}
		if viaOther.code != http.StatusOK || viaOther.fence != outerFence || count(viaOther.holders) != 2 {
			t.Errorf("second lock.New nested: %d fence %s (outer %s), entries %v: want 200, same fence, two entries (in Redis)",
				viaOther.code, viaOther.fence, outerFence, viaOther.holders)
		}
		if len(inspect(t, a, k).Holders) > 0 {
			t.Error("key held after the outermost handler")
		}
	})
}

// TestGRPCDefaultsAndOverrides: the Locker's Defaults (FailFast) and the
// server's Config.OnError shape a refused call of a method that names
// neither; a rule's own OnError and Wait override them.
func TestGRPCDefaultsAndOverrides(t *testing.T) {
	b := redistest.Mini(t)
	prefix := redistest.Prefix(t)
	var lockerErr, methodErr atomic.Int32
	l := lock.NewRedis(defaultClient(t, b.Addr), redisengine.Options{Prefix: prefix}, lock.Defaults(lock.FailFast()))
	defer l.Close()
	gsrv := &shop.Server{
		Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			return shop.New("ReserveReply"), nil
		},
		Create: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			return shop.New("CreateOrderReply"), nil
		},
	}
	create := interceptor.Method(shop.Create, interceptor.Field("order.product_id").As("product_id"), lock.Wait(200*time.Millisecond))
	create.OnError = func(ctx context.Context, m string, err error) error {
		methodErr.Add(1)
		return status.Error(codes.FailedPrecondition, "method's own")
	}
	cc := dial(t, serveGRPC(t, gsrv, grpc.ChainUnaryInterceptor(interceptor.UnaryServer(l, interceptor.Config{
		Rules: []interceptor.Rule{interceptor.Method(shop.Reserve, interceptor.Field("product_id")), create},
		OnError: func(ctx context.Context, m string, err error) error {
			lockerErr.Add(1)
			return status.Error(codes.ResourceExhausted, "server default")
		},
	}))))
	held, err := l.Acquire(context.Background(), key(t, "product_id", "42"), lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), testBound)
	defer cancel()
	start := time.Now()
	_, err = reserve(ctx, cc, 42)
	if status.Code(err) != codes.ResourceExhausted || lockerErr.Load() != 1 {
		t.Errorf("Reserve on a held key: %v (Config.OnError ran %d times), want the server's OnError", err, lockerErr.Load())
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Reserve took %v: the Locker's FailFast was not applied", d)
	}
	start = time.Now()
	err = cc.Invoke(ctx, shop.Create, shop.Set(shop.New("CreateOrderRequest"), "order", shop.Set(shop.New("Order"), "user_id", "u", "product_id", int64(42))), shop.New("CreateOrderReply"))
	if status.Code(err) != codes.FailedPrecondition || methodErr.Load() != 1 {
		t.Errorf("Create on a held key: %v, want the rule's own OnError", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("Create refused after %v: the Method's Wait(200ms) did not override the Locker's FailFast", d)
	}
}
