package lock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
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

// serveGRPC serves srv on a loopback port with opts and returns the
// address.
// unaryServer is interceptor.UnaryServer with rules and nothing else set.
func unaryServer(e lifecycle.Locker, rules ...interceptor.Rule) grpc.UnaryServerInterceptor {
	return interceptor.UnaryServer(e, interceptor.Config{Rules: rules})
}

// streamServer is interceptor.StreamServer with rules and nothing else set.
func streamServer(e lifecycle.Locker, rules ...interceptor.Rule) grpc.StreamServerInterceptor {
	return interceptor.StreamServer(e, interceptor.Config{Rules: rules})
}

func serveGRPC(t *testing.T, srv *shop.Server, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	shop.Register(s, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String()
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func reserve(ctx context.Context, cc *grpc.ClientConn, productID int64) (*dynamicpb.Message, error) {
	reply := shop.New("ReserveReply")
	err := cc.Invoke(ctx, shop.Reserve, shop.Set(shop.New("ReserveRequest"), "product_id", productID, "quantity", int32(1)), reply)
	return reply, err
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if s, _ := status.FromError(err); s.Code() != code {
		t.Fatalf("got %v, want %v", err, code)
	}
}

// TestGRPCSeckill is the flash sale over gRPC: three server instances, each
// with its own Locker and Redis client, sell 10 phones to 100 concurrent
// clients with a racy read-modify-write Reserve. With the lock exactly 10
// are sold; without it the same handler oversells.
func TestGRPCSeckill(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		for _, locked := range []bool{true, false} {
			t.Run(fmt.Sprintf("locked=%v", locked), func(t *testing.T) {
				sold, stock := grpcSeckill(t, b, locked)
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

func grpcSeckill(t *testing.T, b *redistest.Backend, locked bool) (sold, stock int64) {
	const clients, initial = 100, 10
	prefix := redistest.Prefix(t)
	stockKey, soldKey := prefix+"stock", prefix+"sold"
	meet := meetSecond()
	var addrs []string
	var rdb redis.UniversalClient
	opt := redisengine.Options{Prefix: prefix}
	if !b.Real() {
		// miniredis runs each script in a Lua interpreter written in Go,
		// one at a time: a burst of 100 calls under the race detector on a
		// busy 2-core machine can queue there past the default second. The
		// test checks what is sold, not how fast miniredis is.
		opt.Timeout, opt.ReleaseTimeout = 10*time.Second, 10*time.Second
	}
	for range 3 {
		rdb = clientOf(t, b)
		l := lock.NewRedis(rdb, opt)
		t.Cleanup(func() { l.Close() })
		rc := rdb
		srv := &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			n, err := rc.Get(ctx, stockKey).Int64()
			if err != nil {
				return nil, err
			}
			if n <= 0 {
				return nil, status.Error(codes.ResourceExhausted, "sold out")
			}
			meet()
			if err := rc.Set(ctx, stockKey, n-1, 0).Err(); err != nil {
				return nil, err
			}
			rc.Incr(ctx, soldKey)
			return shop.Set(shop.New("ReserveReply"), "left", n-1), nil
		}}
		var opts []grpc.ServerOption
		if locked {
			opts = append(opts, grpc.ChainUnaryInterceptor(unaryServer(l,
				interceptor.Method(shop.Reserve, interceptor.Field("product_id"), lock.Wait(30*time.Second)))))
		}
		addrs = append(addrs, serveGRPC(t, srv, opts...))
	}
	if err := rdb.Set(context.Background(), stockKey, initial, 0).Err(); err != nil {
		t.Fatal(err)
	}
	var conns []*grpc.ClientConn
	for _, a := range addrs {
		conns = append(conns, dial(t, a))
	}
	start := make(chan struct{})
	codesSeen := make(chan codes.Code, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := reserve(ctx, conns[i%len(conns)], 42)
			codesSeen <- status.Code(err)
		}()
	}
	close(start)
	wg.Wait()
	close(codesSeen)
	count := map[codes.Code]int{}
	for c := range codesSeen {
		count[c]++
	}
	ctx := context.Background()
	sold, _ = rdb.Get(ctx, soldKey).Int64()
	stock, _ = rdb.Get(ctx, stockKey).Int64()
	if locked && (count[codes.OK] != initial || count[codes.ResourceExhausted] != clients-initial) {
		t.Fatalf("with the lock, codes %v; want %d OK and the rest ResourceExhausted", count, initial)
	}
	return sold, stock
}

// grpcShop is one gRPC server of Reserve, locked on product_id as the
// resource productID, whose handler blocks until release is closed (if
// not nil).
type grpcShop struct {
	locker  *lock.Locker
	rdb     redis.UniversalClient
	addr    string
	ran     atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func newGRPCShop(t *testing.T, b *redistest.Backend, prefix string, rule interceptor.Rule, opts ...lock.Option) *grpcShop {
	g := &grpcShop{rdb: clientOf(t, b), entered: make(chan struct{}, 16)}
	g.locker = lock.NewRedis(g.rdb, redisengine.Options{Prefix: prefix}, opts...)
	t.Cleanup(func() { g.locker.Close() })
	srv := &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		g.ran.Add(1)
		g.entered <- struct{}{}
		if g.release != nil {
			select {
			case <-g.release:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		fence, _ := lock.FencingToken(ctx)
		return shop.Set(shop.New("ReserveReply"), "fence", fence), nil
	}}
	g.addr = serveGRPC(t, srv, grpc.ChainUnaryInterceptor(unaryServer(g.locker, rule)))
	return g
}

// TestGRPCContention: while one call holds the lock, a fail-fast call ends
// with Aborted and a RetryInfo at once, and a blocking call gets in when
// the holder finishes.
func TestGRPCContention(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		holder := newGRPCShop(t, b, prefix, interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID")))
		holder.release = make(chan struct{})
		fast := newGRPCShop(t, b, prefix, interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"), lock.FailFast()))
		blocking := newGRPCShop(t, b, prefix, interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"), lock.Wait(20*time.Second)))
		ctx := context.Background()

		held := make(chan error, 1)
		go func() { _, err := reserve(ctx, dial(t, holder.addr), 42); held <- err }()
		<-holder.entered

		_, err := reserve(ctx, dial(t, fast.addr), 42)
		wantCode(t, err, codes.Aborted)
		if fast.ran.Load() != 0 {
			t.Fatal("fail-fast handler ran while the lock was held")
		}
		s, _ := status.FromError(err)
		var retry *errdetails.RetryInfo
		for _, d := range s.Details() {
			if r, ok := d.(*errdetails.RetryInfo); ok {
				retry = r
			}
		}
		if retry == nil || retry.RetryDelay.AsDuration() <= 0 || retry.RetryDelay.AsDuration() > 10*time.Second {
			t.Fatalf("Aborted without a RetryInfo of the remaining lease: %v", s.Details())
		}
		// Another product is not locked.
		if _, err := reserve(ctx, dial(t, fast.addr), 43); err != nil {
			t.Fatalf("product 43: %v", err)
		}

		waited := make(chan error, 1)
		go func() { _, err := reserve(ctx, dial(t, blocking.addr), 42); waited <- err }()
		eventually(t, 10*time.Second, "the blocking call queues", func() bool {
			n, _ := holder.rdb.ZCard(ctx, prefix+"{productID:42}:q").Result()
			return n == 1
		})
		if blocking.ran.Load() != 0 {
			t.Fatal("blocking handler ran while the lock was held")
		}
		close(holder.release)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		if err := <-waited; err != nil {
			t.Fatalf("blocking call after release: %v", err)
		}
		if info := inspect(t, holder.locker, key(t, "productID", "42")); len(info.Holders) > 0 {
			t.Fatalf("key still held: %+v", info)
		}

		// A short wait runs out: Aborted too.
		holder.release = make(chan struct{})
		go func() { _, err := reserve(ctx, dial(t, holder.addr), 42); held <- err }()
		<-holder.entered
		short := newGRPCShop(t, b, prefix, interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"), lock.Wait(50*time.Millisecond)))
		_, err = reserve(ctx, dial(t, short.addr), 42)
		wantCode(t, err, codes.Aborted)
		close(holder.release)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	})
}

// TestGRPCBadKey: a missing or invalid key ends the call with
// InvalidArgument, the handler never runs and nothing is locked.
func TestGRPCBadKey(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		var ran atomic.Int32
		rdb := clientOf(t, b)
		l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix})
		defer l.Close()
		srv := &shop.Server{
			Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
				ran.Add(1)
				return shop.New("ReserveReply"), nil
			},
			Create: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
				ran.Add(1)
				return shop.New("CreateOrderReply"), nil
			},
		}
		cc := dial(t, serveGRPC(t, srv, grpc.ChainUnaryInterceptor(unaryServer(l,
			interceptor.Method(shop.Reserve, interceptor.Field("product_id")),
			interceptor.Method(shop.Create, interceptor.Field("order.user_id"), lock.FailFast()),
		))))
		ctx := context.Background()

		_, err := reserve(ctx, cc, 0) // proto3 zero: not sent
		wantCode(t, err, codes.InvalidArgument)
		if s, _ := status.FromError(err); s.Message() != "routelock: invalid lock key: Field(product_id): missing" {
			t.Fatalf("message %q", s.Message())
		}
		create := func(order *dynamicpb.Message) error {
			req := shop.New("CreateOrderRequest")
			if order != nil {
				shop.Set(req, "order", order)
			}
			return cc.Invoke(ctx, shop.Create, req, shop.New("CreateOrderReply"))
		}
		wantCode(t, create(nil), codes.InvalidArgument)
		wantCode(t, create(shop.Set(shop.New("Order"), "product_id", int64(1))), codes.InvalidArgument)
		long := make([]byte, 257)
		for i := range long {
			long[i] = 'u'
		}
		wantCode(t, create(shop.Set(shop.New("Order"), "user_id", string(long))), codes.InvalidArgument)
		// A malformed propagated token is refused too.
		_, err = reserve(metadata.AppendToOutgoingContext(ctx, "routelock-token", "not-a-token"), cc, 42)
		wantCode(t, err, codes.InvalidArgument)
		if ran.Load() != 0 {
			t.Fatalf("handler ran %d times for bad keys", ran.Load())
		}
		if n, err := scanAll(rdb, prefix+"*"); err != nil || len(n) != 0 {
			t.Fatalf("bad keys left Redis keys: %v (%v)", n, err)
		}
		// A good one goes through.
		if err := create(shop.Set(shop.New("Order"), "user_id", "u7")); err != nil {
			t.Fatal(err)
		}
		if _, err := reserve(ctx, cc, 42); err != nil {
			t.Fatal(err)
		}
	})
}

// TestGRPCRedisDown: with Redis stopped a locked method fails with
// Unavailable without running its handler; an unlocked method still works.
func TestGRPCRedisDown(t *testing.T) {
	redistest.Own(t, func(t *testing.T, addr string, stop func()) {
		var ran atomic.Int32
		l := lock.NewRedis(client(t, addr), redisengine.Options{Prefix: redistest.Prefix(t)})
		defer l.Close()
		srv := &shop.Server{
			Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
				ran.Add(1)
				return shop.New("ReserveReply"), nil
			},
			Create: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
				return shop.New("CreateOrderReply"), nil
			},
		}
		cc := dial(t, serveGRPC(t, srv, grpc.ChainUnaryInterceptor(unaryServer(l,
			interceptor.Method(shop.Reserve, interceptor.Field("product_id"))))))
		ctx := context.Background()
		if _, err := reserve(ctx, cc, 42); err != nil || ran.Load() != 1 {
			t.Fatalf("with Redis up: %v", err)
		}
		stop()
		_, err := reserve(ctx, cc, 42)
		wantCode(t, err, codes.Unavailable)
		if s, _ := status.FromError(err); s.Message() != "routelock: lock service unavailable" {
			t.Fatalf("message leaks: %q", s.Message())
		}
		if ran.Load() != 1 {
			t.Fatal("handler ran with Redis down")
		}
		if err := cc.Invoke(ctx, shop.Create, shop.New("CreateOrderRequest"), shop.New("CreateOrderReply")); err != nil {
			t.Fatalf("unlocked method with Redis down: %v", err)
		}
	})
}

// TestCrossProtocolReentry: an HTTP route holding productID:42 calls the
// gRPC method Reserve, locked on product_id as productID, which calls back
// an HTTP route locked on productID. All three re-enter one lock with one
// fencing token, the count reaches 3, and the key is gone when the
// outermost call returns. Without propagation the gRPC call is refused.
func TestCrossProtocolReentry(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		k := key(t, "productID", "42")

		// Service C: HTTP, the innermost.
		var cInfo atomic.Value
		var cFence atomic.Int64
		c := newApp(t, b, prefix, func(a *app) http.Handler {
			r := chi.NewRouter()
			r.Use(a.locker.ByParam("productID", lock.FailFast()))
			r.Post("/products/{productID}/audit", func(w http.ResponseWriter, r *http.Request) {
				f, _ := lock.FencingToken(r.Context())
				cFence.Store(f)
				info, err := a.locker.Operator().Inspect(r.Context(), k)
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				cInfo.Store(info)
			})
			return r
		})

		// Service B: gRPC, calls C with the token.
		for _, propagate := range []bool{true, false} {
			t.Run(fmt.Sprintf("propagate=%v", propagate), func(t *testing.T) {
				bLocker := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix})
				defer bLocker.Close()
				hc := httpClient(t, middleware.Transport(nil))
				var bFence atomic.Int64
				srv := &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
					f, _ := lock.FencingToken(ctx)
					bFence.Store(f)
					id := strconv.FormatInt(shop.Int(req, "product_id"), 10)
					code, err := post(ctx, hc, c.srv.URL+"/products/"+id+"/audit")
					if err != nil {
						return nil, err
					}
					if code != 200 {
						return nil, status.Errorf(codes.FailedPrecondition, "audit: %d", code)
					}
					return shop.New("ReserveReply"), nil
				}}
				bAddr := serveGRPC(t, srv, grpc.ChainUnaryInterceptor(unaryServer(bLocker,
					interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID"), lock.FailFast()))))
				var copts []grpc.DialOption
				if propagate {
					copts = append(copts, grpc.WithChainUnaryInterceptor(interceptor.UnaryClient()))
				}
				cc := dial(t, bAddr, copts...)

				// Service A: HTTP, the outermost, calls B.
				var aFence atomic.Int64
				a := newApp(t, b, prefix, func(a *app) http.Handler {
					r := chi.NewRouter()
					r.Use(a.locker.ByParam("productID"))
					r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
						f, _ := lock.FencingToken(r.Context())
						aFence.Store(f)
						id, _ := strconv.ParseInt(chi.URLParam(r, "productID"), 10, 64)
						if _, err := reserve(r.Context(), cc, id); err != nil {
							http.Error(w, status.Code(err).String(), http.StatusBadGateway)
							return
						}
					})
					return r
				})
				res := do(t, httpClient(t, nil), "POST", a.srv.URL+"/products/42/buy", nil)
				if !propagate {
					if res.status != http.StatusBadGateway || res.body != "Aborted\n" {
						t.Fatalf("without propagation: %d %q, want 502 Aborted", res.status, res.body)
					}
					if bFence.Load() != 0 {
						t.Fatal("gRPC handler ran without the lock")
					}
				} else {
					if res.status != 200 {
						t.Fatalf("with propagation: %d %q", res.status, res.body)
					}
					info, _ := cInfo.Load().(lockcore.Info)
					if len(info.Holders) != 1 {
						t.Fatalf("innermost handler saw holders %d, want 1", len(info.Holders))
					}
					if f := aFence.Load(); f == 0 || bFence.Load() != f || cFence.Load() != f {
						t.Fatalf("fences %d %d %d: re-entry must keep the fence", f, bFence.Load(), cFence.Load())
					}
					for _, h := range info.Holders {
						if h.Count != 3 {
							t.Fatalf("count in the innermost handler %d, want 3", h.Count)
						}
					}
				}
				if info := inspect(t, bLocker, k); len(info.Holders) > 0 {
					t.Fatalf("key still held after the outermost call: %+v", info)
				}
			})
		}
	})
}

// TestGRPCStream: a key from the first message is locked inside the
// handler's first RecvMsg and held until the handler returns; a key from
// metadata is locked before the handler runs.
func TestGRPCStream(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		rdb := clientOf(t, b)
		l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix})
		defer l.Close()
		type seen struct {
			fenceBefore, fenceAfter int64
			err                     error
		}
		seenc := make(chan seen, 4)
		hold := make(chan struct{})
		srv := &shop.Server{Restock: func(ss grpc.ServerStream) error {
			var s seen
			s.fenceBefore, _ = lock.FencingToken(ss.Context())
			total := int64(0)
			for {
				m := shop.New("ReserveRequest")
				err := ss.RecvMsg(m)
				if err == io.EOF {
					break
				}
				if err != nil {
					s.err = err
					seenc <- s
					return err
				}
				if s.fenceAfter == 0 {
					s.fenceAfter, _ = lock.FencingToken(ss.Context())
					seenc <- s
					<-hold
				}
				total += shop.Int(m, "quantity")
			}
			return ss.SendMsg(shop.Set(shop.New("ReserveReply"), "left", total))
		}}
		cc := dial(t, serveGRPC(t, srv, grpc.ChainStreamInterceptor(streamServer(l,
			interceptor.Method(shop.Restock, interceptor.Field("product_id"), lock.FailFast())))))
		ctx := context.Background()
		open := func(productID int64) (grpc.ClientStream, error) {
			st, err := cc.NewStream(ctx, shop.RestockDesc, shop.Restock)
			if err != nil {
				return nil, err
			}
			for range 3 {
				err := st.SendMsg(shop.Set(shop.New("ReserveRequest"), "product_id", productID, "quantity", int32(2)))
				if err == io.EOF {
					return st, nil // the server ended the stream; RecvMsg tells how
				}
				if err != nil {
					return nil, err
				}
			}
			return st, st.CloseSend()
		}
		st, err := open(42)
		if err != nil {
			t.Fatal(err)
		}
		s := <-seenc
		if s.fenceBefore != 0 || s.fenceAfter == 0 || s.err != nil {
			t.Fatalf("stream saw fence %d before its first message and %d after (%v)", s.fenceBefore, s.fenceAfter, s.err)
		}
		if len(inspect(t, l, key(t, "product_id", "42")).Holders) == 0 {
			t.Fatal("not locked after the first message")
		}
		// A second stream on the same product is refused at its first message.
		st2, err := open(42)
		if err != nil {
			t.Fatal(err)
		}
		err = st2.RecvMsg(shop.New("ReserveReply"))
		wantCode(t, err, codes.Aborted)
		if s := <-seenc; status.Code(s.err) != codes.Aborted {
			t.Fatalf("second stream's RecvMsg: %v", s.err)
		}
		close(hold)
		reply := shop.New("ReserveReply")
		if err := st.RecvMsg(reply); err != nil || shop.Int(reply, "left") != 6 {
			t.Fatalf("first stream: %v, total %d", err, shop.Int(reply, "left"))
		}
		eventually(t, 5*time.Second, "stream's lock released", func() bool {
			return len(inspect(t, l, key(t, "product_id", "42")).Holders) == 0
		})

		// Keyed by metadata: locked before the handler runs.
		var mdFence atomic.Int64
		srv2 := &shop.Server{Restock: func(ss grpc.ServerStream) error {
			f, _ := lock.FencingToken(ss.Context())
			mdFence.Store(f)
			for {
				if err := ss.RecvMsg(shop.New("ReserveRequest")); err == io.EOF {
					return ss.SendMsg(shop.New("ReserveReply"))
				} else if err != nil {
					return err
				}
			}
		}}
		cc2 := dial(t, serveGRPC(t, srv2, grpc.ChainStreamInterceptor(streamServer(l,
			interceptor.Method("/shop.Inventory/*", interceptor.Metadata("x-warehouse"))))))
		st3, err := cc2.NewStream(metadata.AppendToOutgoingContext(ctx, "x-warehouse", "w1"), shop.RestockDesc, shop.Restock)
		if err != nil {
			t.Fatal(err)
		}
		if err := st3.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := st3.RecvMsg(shop.New("ReserveReply")); err != nil || mdFence.Load() == 0 {
			t.Fatalf("metadata-keyed stream: %v, fence %d", err, mdFence.Load())
		}
		st4, _ := cc2.NewStream(ctx, shop.RestockDesc, shop.Restock) // no x-warehouse
		st4.CloseSend()
		wantCode(t, st4.RecvMsg(shop.New("ReserveReply")), codes.InvalidArgument)
	})
}

// TestGRPCPanicAndLoss: a panicking handler releases its lock and the panic
// reaches the recovery interceptor outside; a lease deleted behind the
// handler's back cancels its context with cause ErrLockLost.
func TestGRPCPanicAndLoss(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		rdb := clientOf(t, b)
		l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix}, lock.Defaults(lock.TTL(300*time.Millisecond)))
		defer l.Close()
		recovered := make(chan any, 1)
		recovery := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (_ any, err error) {
			defer func() {
				if p := recover(); p != nil {
					recovered <- p
					err = status.Error(codes.Internal, "panic")
				}
			}()
			return h(ctx, req)
		}
		cause := make(chan error, 1)
		srv := &shop.Server{
			Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
				panic("boom")
			},
			Create: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
				if n, err := rdb.Del(ctx, prefix+"{order.user_id:u1}").Result(); n != 1 { // the lease, behind the holder's back
					cause <- fmt.Errorf("deleting the lease: %d %v", n, err)
					return nil, err
				}
				select {
				case <-ctx.Done():
					cause <- context.Cause(ctx)
				case <-time.After(10 * time.Second):
					cause <- errors.New("lease loss not noticed in 10s")
				}
				return nil, ctx.Err()
			},
		}
		cc := dial(t, serveGRPC(t, srv, grpc.ChainUnaryInterceptor(recovery, unaryServer(l,
			interceptor.Method(shop.Reserve, interceptor.Field("product_id")),
			interceptor.Method(shop.Create, interceptor.Field("order.user_id"))))))
		ctx := context.Background()
		_, err := reserve(ctx, cc, 42)
		wantCode(t, err, codes.Internal)
		if p := <-recovered; p != "boom" {
			t.Fatalf("recovered %v", p)
		}
		if info := inspect(t, l, key(t, "product_id", "42")); len(info.Holders) > 0 {
			t.Fatalf("lock held after panic: %+v", info)
		}
		req := shop.Set(shop.New("CreateOrderRequest"), "order", shop.Set(shop.New("Order"), "user_id", "u1"))
		_ = cc.Invoke(ctx, shop.Create, req, shop.New("CreateOrderReply"))
		if err := <-cause; !errors.Is(err, lockcore.ErrLockLost) {
			t.Fatalf("cause %v, want ErrLockLost", err)
		}
	})
}

// TestGRPCRules: exact, service and catch-all rules; a wildcard rule whose
// field a method lacks passes it through; an exact one is a configuration
// error (Internal); untrusted tokens are ignored.
func TestGRPCRules(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		l := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix}, lock.Defaults(lock.FailFast()))
		defer l.Close()
		unaryServer := func(e lifecycle.Locker, rules ...interceptor.Rule) grpc.UnaryServerInterceptor {
			return interceptor.UnaryServer(e, interceptor.Config{Rules: rules, TrustToken: func(ctx context.Context, method string) bool {
				md, _ := metadata.FromIncomingContext(ctx)
				return len(md["x-internal"]) == 1
			}})
		}
		keys := make(chan []string, 4)
		handler := func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if len(md["routelock-token"]) != 0 {
				return nil, errors.New("handler sees the token")
			}
			keys <- lock.Keys(ctx)
			return nil, status.Error(codes.NotFound, "done") // any reply will do
		}
		srv := &shop.Server{Reserve: handler, Create: handler}
		call := func(cc *grpc.ClientConn, ctx context.Context, method string) ([]string, error) {
			var req *dynamicpb.Message
			if method == shop.Reserve {
				req = shop.Set(shop.New("ReserveRequest"), "product_id", int64(7))
			} else {
				req = shop.Set(shop.New("CreateOrderRequest"), "order", shop.Set(shop.New("Order"), "user_id", "u"))
			}
			err := cc.Invoke(ctx, method, req, shop.New("ReserveReply"))
			if status.Code(err) != codes.NotFound {
				return nil, err
			}
			return <-keys, nil
		}
		ctx := context.Background()

		// Catch-all on product_id: Reserve locks, Create (no such field) passes.
		cc := dial(t, serveGRPC(t, srv, grpc.ChainUnaryInterceptor(unaryServer(l,
			interceptor.Method("*", interceptor.Field("product_id"))))))
		if k, err := call(cc, ctx, shop.Reserve); err != nil || len(k) != 1 || k[0] != "product_id:7" {
			t.Fatalf("catch-all Reserve: %v %v", k, err)
		}
		if k, err := call(cc, ctx, shop.Create); err != nil || len(k) != 0 {
			t.Fatalf("catch-all Create should pass unlocked: %v %v", k, err)
		}
		// Exact beats service beats catch-all; an exact rule on a field the
		// message lacks is Internal.
		cc = dial(t, serveGRPC(t, srv, grpc.ChainUnaryInterceptor(unaryServer(l,
			interceptor.Method("*", interceptor.Field("order.user_id")),
			interceptor.Method("/shop.Inventory/*", interceptor.Field("product_id").As("inv")),
			interceptor.Method(shop.Reserve, interceptor.Field("order.user_id"))))))
		_, err := call(cc, ctx, shop.Reserve)
		wantCode(t, err, codes.Internal)
		if k, err := call(cc, ctx, shop.Create); err != nil || len(k) != 1 || k[0] != "order.user_id:u" {
			t.Fatalf("catch-all Create: %v %v", k, err)
		}
		cc = dial(t, serveGRPC(t, srv, grpc.ChainUnaryInterceptor(unaryServer(l,
			interceptor.Method("/shop.Inventory/*", interceptor.Field("product_id").As("inv"))))))
		if k, err := call(cc, ctx, shop.Reserve); err != nil || len(k) != 1 || k[0] != "inv:7" {
			t.Fatalf("service rule: %v %v", k, err)
		}

		// Trust: hold inv:7 and re-enter with the token only from a trusted caller.
		lease, err := l.Acquire(ctx, key(t, "inv", "7"), lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		withTok := metadata.AppendToOutgoingContext(ctx, "routelock-token", lease.Token())
		if _, err := call(cc, withTok, shop.Reserve); status.Code(err) != codes.Aborted {
			t.Fatalf("untrusted token: %v, want Aborted", err)
		}
		if k, err := call(cc, metadata.AppendToOutgoingContext(withTok, "x-internal", "1"), shop.Reserve); err != nil || len(k) != 1 {
			t.Fatalf("trusted token should re-enter: %v %v", k, err)
		}
	})
}

// TestMethodPanics: configuration errors panic when the rule is made.
func TestMethodPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"no slash":      func() { interceptor.Method("shop.Inventory/Reserve", interceptor.Field("id")) },
		"no method":     func() { interceptor.Method("/shop.Inventory/", interceptor.Field("id")) },
		"bad wildcard":  func() { interceptor.Method("/shop.*/Reserve", interceptor.Field("id")) },
		"zero key":      func() { interceptor.Method(shop.Reserve, keyfunc.Func{}) },
		"HTTP-only key": func() { interceptor.Method(shop.Reserve, keyfunc.Param("id")) },
		"bad Policy": func() {
			interceptor.Method(shop.Reserve, interceptor.Field("id"), lifecycle.Policy{TTL: time.Millisecond})
		},
		"RPC key in By": func() { (&lock.Locker{}).By(interceptor.Field("id")) },
		"duplicate": func() {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
			defer rdb.Close()
			l := lock.New(rdb)
			defer l.Close()
			unaryServer(l, interceptor.Method(shop.Reserve, interceptor.Field("a")), interceptor.Method(shop.Reserve, interceptor.Field("b")))
		},
		"zero rule": func() {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
			defer rdb.Close()
			l := lock.New(rdb)
			defer l.Close()
			unaryServer(l, interceptor.Rule{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}
