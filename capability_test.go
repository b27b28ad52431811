package lock_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
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
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// madeUp is a token no hold was ever given: any caller can send it.
const madeUp = "0123456789abcdef-attacker"

// defaultClient is a client at go-redis's defaults, as users build it.
func defaultClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// post sends a POST with ctx and header pairs hdr and returns the status.
func post(ctx context.Context, hc *http.Client, url string, hdr ...string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, nil)
	if err != nil {
		return 0, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// gate is a handler body that records who entered, how many were inside at
// once, and holds each caller until the test lets it go.
type gate struct {
	entered chan entered
	proceed chan struct{}
	done    chan struct{} // closed at the end of the test: nobody waits any more
	in      atomic.Int32
	over    atomic.Int32 // entries that found another caller inside
}

type entered struct {
	seq   int
	fence int64
	tok   string
}

func newGate() *gate {
	return &gate{entered: make(chan entered, 64), proceed: make(chan struct{}), done: make(chan struct{})}
}

func (g *gate) run(ctx context.Context, seq int) {
	if g.in.Add(1) > 1 {
		g.over.Add(1)
	}
	defer g.in.Add(-1)
	f, _ := lock.FencingToken(ctx)
	tok := innermostToken(ctx)
	g.entered <- entered{seq, f, tok}
	select {
	case <-g.proceed:
	case <-g.done:
	case <-ctx.Done():
	}
}

func (g *gate) next(t *testing.T) entered {
	t.Helper()
	select {
	case e := <-g.entered:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no request entered the handler within 10 s")
		return entered{}
	}
}

// shopPair is one HTTP service and one gRPC service with their own Lockers
// at their defaults on default clients, both locking productID:42 through
// the gate.
type shopPair struct {
	http *httptest.Server
	cc   *grpc.ClientConn
	l    *lock.Locker
}

func newShopPair(t *testing.T, addr, prefix string, g *gate) *shopPair {
	hl := lock.NewRedis(defaultClient(t, addr), redisengine.Options{Prefix: prefix})
	t.Cleanup(func() { hl.Close() })
	r := chi.NewRouter()
	r.Use(hl.ByParam("productID"))
	r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		seq, _ := strconv.Atoi(r.Header.Get("X-Seq"))
		g.run(r.Context(), seq)
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	gl := lock.NewRedis(defaultClient(t, addr), redisengine.Options{Prefix: prefix})
	t.Cleanup(func() { gl.Close() })
	gaddr := serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		seq, _ := strconv.Atoi(md.Get("x-seq")[0])
		g.run(ctx, seq)
		return shop.New("ReserveReply"), nil
	}}, grpc.ChainUnaryInterceptor(unaryServer(gl,
		interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID")))))
	// Cleanups run last first: the handlers are let go before the servers
	// wait for them.
	t.Cleanup(func() { close(g.done) })
	return &shopPair{http: srv, cc: dial(t, gaddr), l: hl}
}

// TestMadeUpTokenSerialises checks that a token the library did not mint
// grants nothing: ten concurrent requests for one product, all bearing the
// same made-up token, over HTTP, gRPC and both, at the library's defaults,
// run the handler one at a time, in arrival order, each with a fencing
// token greater than the one before and a token of its own.
func TestMadeUpTokenSerialises(t *testing.T) {
	b := redistest.Best(t)
	for _, via := range []string{"http", "grpc", "mixed"} {
		t.Run(via, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			g := newGate()
			p := newShopPair(t, b.Addr, prefix, g)
			k := key(t, "productID", "42")
			hc := httpClient(t, nil)
			const n = 10
			results := make(chan string, n)
			send := func(seq int) {
				if via == "grpc" || via == "mixed" && seq%2 == 1 {
					ctx := metadata.AppendToOutgoingContext(context.Background(), "routelock-token", madeUp, "x-seq", strconv.Itoa(seq))
					_, err := reserve(ctx, p.cc, 42)
					results <- fmt.Sprintf("grpc %d: %v", seq, status.Code(err))
					return
				}
				req, _ := http.NewRequest("POST", p.http.URL+"/products/42/buy", nil)
				req.Header.Set("Routelock-Token", madeUp)
				req.Header.Set("X-Seq", strconv.Itoa(seq))
				resp, err := hc.Do(req)
				if err != nil {
					results <- fmt.Sprintf("http %d: %v", seq, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				results <- fmt.Sprintf("http %d: %d", seq, resp.StatusCode)
			}

			go send(0)
			got := []entered{g.next(t)}
			// The others arrive one by one, each queued before the next
			// is sent, so that arrival order is known.
			for seq := 1; seq < n; seq++ {
				go send(seq)
				eventually(t, 10*time.Second, fmt.Sprintf("request %d queued", seq), func() bool {
					return len(inspect(t, p.l, k).Waiters) == seq || g.in.Load() > 1
				})
				if g.in.Load() > 1 {
					t.Fatalf("request %d bearing the made-up token entered the handler beside another", seq)
				}
			}
			for range n - 1 {
				g.proceed <- struct{}{}
				got = append(got, g.next(t))
			}
			g.proceed <- struct{}{}
			for range n {
				if r := <-results; r[len(r)-2:] != "OK" && r[len(r)-3:] != "200" {
					t.Errorf("%s; want success", r)
				}
			}
			if o := g.over.Load(); o > 0 {
				t.Fatalf("%d requests entered the handler beside another", o)
			}
			toks := map[string]bool{}
			for i, e := range got {
				if e.seq != i {
					t.Errorf("entry %d was request %d; want arrival order", i, e.seq)
				}
				if i > 0 && e.fence <= got[i-1].fence {
					t.Errorf("entry %d: fence %d after %d; want strictly increasing", i, e.fence, got[i-1].fence)
				}
				if e.tok == madeUp || toks[e.tok] {
					t.Errorf("entry %d holds the lock under a token it was sent or shares; want its own", i)
				}
				toks[e.tok] = true
			}
			if info := inspect(t, p.l, k); (len(info.Holders) > 0) || len(info.Waiters) != 0 {
				t.Fatalf("left in Redis: %+v", info)
			}
		})
	}
}

// TestTokenGrantsOnlyItsLiveHold checks that a real token, leaked, grants
// re-entry into the hold that minted it while that hold is live, and
// nothing else: not the lock of another key, and not a lock after its own
// hold expired.
func TestTokenGrantsOnlyItsLiveHold(t *testing.T) {
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	holder := lock.NewRedis(defaultClient(t, b.Addr), redisengine.Options{Prefix: prefix})
	defer holder.Close()

	// An expired hold: its key vanished from Redis, and the lease knew.
	old, err := holder.Acquire(ctx, key(t, "productID", "42"), lifecycle.Policy{Wait: lockcore.FailFast, TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Client(t).Del(ctx, prefix+"{productID:42}").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the vanished hold was not declared lost")
	}
	live42, err := holder.Acquire(ctx, key(t, "productID", "42"), lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	defer live42.Release(ctx)
	live7, err := holder.Acquire(ctx, key(t, "productID", "7"), lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	defer live7.Release(ctx)
	if old.Token() == live42.Token() {
		t.Fatal("the fresh hold took the expired hold's token")
	}

	var ran atomic.Int32
	l := lock.NewRedis(defaultClient(t, b.Addr), redisengine.Options{Prefix: prefix}, lock.Defaults(lock.FailFast()))
	defer l.Close()
	r := chi.NewRouter()
	r.Use(l.ByParam("productID"))
	seen := make(chan string, 2)
	r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		seen <- innermostToken(r.Context())
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	cc := dial(t, serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		ran.Add(1)
		seen <- innermostToken(ctx)
		return shop.New("ReserveReply"), nil
	}}, grpc.ChainUnaryInterceptor(unaryServer(l,
		interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"))))))
	hc := httpClient(t, nil)

	for _, c := range []struct {
		what     string
		tok      string
		product  int64
		http     int
		grpc     codes.Code
		reenters bool
	}{
		{"the live hold's own token", live42.Token(), 42, 200, codes.OK, true},
		{"the token of a live hold of another key", live7.Token(), 42, 409, codes.Aborted, false},
		{"the token of an expired hold", old.Token(), 42, 409, codes.Aborted, false},
		{"the token of an expired hold, on a free key", old.Token(), 43, 200, codes.OK, false},
	} {
		res := do(t, hc, "POST", srv.URL+"/products/"+strconv.FormatInt(c.product, 10)+"/buy", nil, "Routelock-Token", c.tok)
		if res.status != c.http {
			t.Errorf("HTTP, %s: %d, want %d", c.what, res.status, c.http)
		}
		_, err := reserve(metadata.AppendToOutgoingContext(ctx, "routelock-token", c.tok), cc, c.product)
		if code := status.Code(err); code != c.grpc {
			t.Errorf("gRPC, %s: %v, want %v", c.what, code, c.grpc)
		}
		for range 2 {
			if c.http != 200 {
				break
			}
			if tok := <-seen; (tok == c.tok) != c.reenters {
				t.Errorf("%s: the handler held the lock under the token sent: %v, want %v", c.what, tok == c.tok, c.reenters)
			}
		}
	}
	if n := ran.Load(); n != 4 {
		t.Fatalf("handlers ran %d times, want 4", n)
	}
}

// TestChainReentersEveryLock is the headline across protocols at the
// library's defaults: service A (HTTP) holds productID:42 and calls B
// (gRPC), which locks userID:7 and calls C (HTTP), which locks userID:7 and
// productID:42. C re-enters both, with the fencing tokens A and B got, and
// both keys are gone once A's request ends.
func TestChainReentersEveryLock(t *testing.T) {
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	product, user := key(t, "productID", "42"), key(t, "userID", "7")

	type view struct {
		fences [2]int64
		counts [2]int
	}
	cView := make(chan view, 1)
	cl := lock.NewRedis(defaultClient(t, b.Addr), redisengine.Options{Prefix: prefix})
	defer cl.Close()
	cr := chi.NewRouter()
	cr.With(cl.By(keyfunc.Header("X-User-ID").As("userID")), cl.ByParam("productID")).
		Post("/products/{productID}/ship", func(w http.ResponseWriter, r *http.Request) {
			var v view
			for i, k := range []lockcore.Key{product, user} {
				info := inspect(t, cl, k)
				for _, h := range info.Holders {
					v.counts[i] = h.Count
				}
				v.fences[i] = info.Fence
			}
			held := lifecycle.HeldFrom(r.Context())
			if len(held) != 2 {
				t.Errorf("C's context holds %d locks, want 2", len(held))
			}
			cView <- v
		})
	c := httptest.NewServer(cr)
	defer c.Close()

	var bFence atomic.Int64
	bl := lock.NewRedis(defaultClient(t, b.Addr), redisengine.Options{Prefix: prefix})
	defer bl.Close()
	hc := httpClient(t, middleware.Transport(nil))
	baddr := serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		f, _ := lock.FencingToken(ctx)
		bFence.Store(f)
		code, err := post(ctx, hc, c.URL+"/products/42/ship", "X-User-ID", "7")
		if err != nil {
			return nil, err
		}
		if code != 200 {
			return nil, status.Errorf(codes.FailedPrecondition, "C answered %d", code)
		}
		return shop.New("ReserveReply"), nil
	}}, grpc.ChainUnaryInterceptor(unaryServer(bl,
		interceptor.Method(shop.Reserve, interceptor.Metadata("x-user-id").As("userID")))))
	cc := dial(t, baddr, grpc.WithChainUnaryInterceptor(interceptor.UnaryClient()))

	var aFence atomic.Int64
	al := lock.NewRedis(defaultClient(t, b.Addr), redisengine.Options{Prefix: prefix})
	defer al.Close()
	ar := chi.NewRouter()
	ar.Use(al.ByParam("productID"))
	ar.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		f, _ := lock.FencingToken(r.Context())
		aFence.Store(f)
		ctx := metadata.AppendToOutgoingContext(r.Context(), "x-user-id", "7")
		if _, err := reserve(ctx, cc, 42); err != nil {
			http.Error(w, status.Convert(err).Message(), http.StatusBadGateway)
		}
	})
	a := httptest.NewServer(ar)
	defer a.Close()

	res := do(t, httpClient(t, nil), "POST", a.URL+"/products/42/buy", nil)
	if res.status != 200 {
		t.Fatalf("A: %d %q", res.status, res.body)
	}
	v := <-cView
	if v.fences[0] != aFence.Load() || v.fences[1] != bFence.Load() || aFence.Load() == 0 || bFence.Load() == 0 {
		t.Errorf("fences in C: product %d, user %d; want A's %d and B's %d", v.fences[0], v.fences[1], aFence.Load(), bFence.Load())
	}
	if v.counts != [2]int{2, 2} {
		t.Errorf("counts in C: product %d, user %d; want 2 and 2", v.counts[0], v.counts[1])
	}
	for _, k := range []lockcore.Key{product, user} {
		if info := inspect(t, al, k); len(info.Holders) > 0 {
			t.Errorf("%v still held after A's request: %+v", k, info)
		}
	}
}

// TestHostileTokens sends 10,000 hostile token values, over HTTP and gRPC,
// to services at their defaults (every caller may bring a token) while
// productID:42 is held: random well-formed tokens, freshly minted ones,
// malformed, oversized and undersized values, duplicated headers and
// metadata, lists too long or with empty elements, and tokens replayed from
// an expired hold, from the hold of another key and from earlier requests.
// None may enter the held lock, and no response or log line may carry a
// token.
func TestHostileTokens(t *testing.T) {
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	var logs syncBuffer
	log.SetOutput(&logs)
	defer log.SetOutput(os.Stderr)

	holder := lock.NewRedis(defaultClient(t, b.Addr), redisengine.Options{Prefix: prefix})
	defer holder.Close()
	old, err := holder.Acquire(ctx, key(t, "productID", "41"), lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := holder.Acquire(ctx, key(t, "productID", "42"), lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	other, err := holder.Acquire(ctx, key(t, "productID", "7"), lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)

	var ran atomic.Int32
	l := lock.NewRedis(defaultClient(t, b.Addr), redisengine.Options{Prefix: prefix}, lock.Defaults(lock.FailFast()))
	defer l.Close()
	r := chi.NewRouter()
	r.Use(l.ByParam("productID"))
	r.Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) { ran.Add(1) })
	srv := httptest.NewServer(r)
	defer srv.Close()
	cc := dial(t, serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		ran.Add(1)
		return shop.New("ReserveReply"), nil
	}}, grpc.ChainUnaryInterceptor(unaryServer(l,
		interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"))))))
	hc := httpClient(t, nil)

	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int, from string) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = from[rng.IntN(len(from))]
		}
		return string(b)
	}
	var sent []string // well-formed tokens sent, replayed later
	hostile := func() (vals []string, kind string) {
		switch rng.IntN(9) {
		case 0:
			tok := word(16+rng.IntN(49), alnum)
			sent = append(sent, tok)
			return []string{tok}, "random"
		case 1:
			tok := lifecycle.NewToken()
			sent = append(sent, tok)
			return []string{tok}, "minted"
		case 2:
			return []string{word(16+rng.IntN(49), alnum+" \t\x00\x7f\xff;:=\"'{}é")}, "malformed"
		case 3:
			return []string{word(65+rng.IntN(4000), alnum)}, "oversized"
		case 4:
			return []string{word(rng.IntN(16), alnum)}, "undersized"
		case 5:
			return []string{lifecycle.NewToken(), lifecycle.NewToken()}, "duplicated"
		case 6:
			toks := make([]string, 1+rng.IntN(24))
			for i := range toks {
				toks[i] = lifecycle.NewToken()
			}
			if rng.IntN(2) == 0 {
				toks[rng.IntN(len(toks))] = ""
			}
			return []string{strings.Join(toks, ",")}, "list"
		case 7:
			return []string{[]string{old.Token(), other.Token()}[rng.IntN(2)]}, "replayed hold"
		default:
			if len(sent) == 0 {
				return []string{old.Token()}, "replayed hold"
			}
			return []string{sent[rng.IntN(len(sent))]}, "replayed request"
		}
	}

	const total = 10000
	type answer struct {
		kind, out string
		ok        bool
		vals      []string
	}
	answers := make(chan answer, 64)
	jobs := make(chan int)
	var gen sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				gen.Lock()
				vals, kind := hostile()
				gen.Unlock()
				if i%2 == 0 {
					req, _ := http.NewRequest("POST", srv.URL+"/products/42/buy", nil)
					req.Header["Routelock-Token"] = vals
					resp, err := hc.Do(req)
					if err != nil {
						answers <- answer{kind, "no request: " + err.Error(), false, vals}
						continue
					}
					var dump bytes.Buffer
					resp.Header.Write(&dump)
					dump.ReadFrom(resp.Body)
					resp.Body.Close()
					answers <- answer{kind, fmt.Sprintf("%d %s", resp.StatusCode, dump.String()), resp.StatusCode == 200, vals}
					continue
				}
				md := metadata.MD{"routelock-token": vals}
				_, err := reserve(metadata.NewOutgoingContext(ctx, md), cc, 42)
				st := status.Convert(err)
				answers <- answer{kind, fmt.Sprintf("%v %s %v", st.Code(), st.Message(), st.Details()), err == nil, vals}
			}
		}()
	}
	go func() {
		for i := range total {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		close(answers)
	}()
	kinds := map[string]int{}
	n := 0
	for a := range answers {
		n++
		kinds[a.kind]++
		if a.ok {
			t.Errorf("a %s token entered the held lock", a.kind)
		}
		for _, s := range append(a.vals, held.Token(), other.Token(), old.Token()) {
			if len(s) >= 8 && strings.Contains(a.out, s) {
				t.Fatalf("a %s token shows up in the answer %q", a.kind, a.out)
			}
		}
	}
	if n != total || ran.Load() != 0 {
		t.Fatalf("%d answers, handlers ran %d times; want %d and 0", n, ran.Load(), total)
	}
	out := logs.String()
	for _, s := range append(sent, held.Token(), other.Token(), old.Token()) {
		if strings.Contains(out, s) {
			t.Fatal("a token shows up in the log")
		}
	}
	t.Logf("%d hostile tokens by kind: %v", n, kinds)
}

// syncBuffer is a bytes.Buffer for a log that many goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// innermostToken returns the innermost owner token ctx carries (the first
// of lifecycle.TokensFrom), or "" when it carries none.
func innermostToken(ctx context.Context) string {
	if toks := lifecycle.TokensFrom(ctx); len(toks) > 0 {
		return toks[0]
	}
	return ""
}
