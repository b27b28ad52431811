package interceptor_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/examples/grpc/shoppb"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redisconf"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/lockcore/redisengine"
)

// inventory and orders are the generated shop's services, answered by
// the functions they hold.
type inventory struct {
	shoppb.UnimplementedInventoryServer
	reserve func(context.Context, *shoppb.ReserveRequest) (*shoppb.ReserveReply, error)
}

func (s *inventory) Reserve(ctx context.Context, r *shoppb.ReserveRequest) (*shoppb.ReserveReply, error) {
	return s.reserve(ctx, r)
}

type orders struct {
	shoppb.UnimplementedOrdersServer
	create func(context.Context, *shoppb.CreateOrderRequest) (*shoppb.CreateOrderReply, error)
}

func (s *orders) Create(ctx context.Context, r *shoppb.CreateOrderRequest) (*shoppb.CreateOrderReply, error) {
	return s.create(ctx, r)
}

// idemServe starts a server instance on loopback, on its own Locker of the
// Redis of rdb with options o, with Idempotency(c) inside the interceptors
// outer, serving the services register registers; it returns a client
// connection to it.
func idemServe(t *testing.T, rdb redis.UniversalClient, o redisengine.Options, c interceptor.IdempotencyConfig, register func(*grpc.Server), outer ...grpc.UnaryServerInterceptor) *grpc.ClientConn {
	t.Helper()
	l := lock.NewRedis(rdb, o)
	t.Cleanup(func() { _ = l.Close() })
	if c.Policy.Wait == 0 {
		c.Policy = lock.Wait(20 * time.Second)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(append(outer, interceptor.Idempotency(l, c))...))
	register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// answer is one answer: the reply or the error, and whether it was marked
// as a replay.
type answer[R any] struct {
	reply    R
	err      error
	replayed bool
}

// idemCtx returns a context for a call with idempotency key key (none if
// ""), and the metadata pairs md.
func idemCtx(key string, md ...string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if key != "" {
		md = append([]string{"idempotency-key", key}, md...)
	}
	return metadata.AppendToOutgoingContext(ctx, md...), cancel
}

func reserve(cc *grpc.ClientConn, key string, req *shoppb.ReserveRequest, md ...string) answer[*shoppb.ReserveReply] {
	ctx, cancel := idemCtx(key, md...)
	defer cancel()
	var hdr metadata.MD
	r, err := shoppb.NewInventoryClient(cc).Reserve(ctx, req, grpc.Header(&hdr))
	return answer[*shoppb.ReserveReply]{r, err, replayedMark(hdr)}
}

func createOrder(cc *grpc.ClientConn, key string, req *shoppb.CreateOrderRequest, md ...string) answer[*shoppb.CreateOrderReply] {
	ctx, cancel := idemCtx(key, md...)
	defer cancel()
	var hdr metadata.MD
	r, err := shoppb.NewOrdersClient(cc).Create(ctx, req, grpc.Header(&hdr))
	return answer[*shoppb.CreateOrderReply]{r, err, replayedMark(hdr)}
}

func replayedMark(hdr metadata.MD) bool {
	vs := hdr.Get("idempotent-replayed")
	return len(vs) == 1 && vs[0] == "true"
}

// runs counts the runs of a handler by key.
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runs) add(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[key]++
	return r.n[key]
}

func (r *runs) get(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[key]
}

// incomingKey is the idempotency key of a handler's call.
func incomingKey(ctx context.Context) string {
	vs := metadata.ValueFromIncomingContext(ctx, "idempotency-key")
	if len(vs) != 1 {
		return ""
	}
	return vs[0]
}

// TestIdempotencyRunsOnceAcrossInstances: 30 keys, each sent 10 times at
// once, spread over 3 server instances on one Redis: each key's handler
// ran once, as the handler counts, and every duplicate got the first
// reply (proto.Equal), marked as a replay; a retry after all of them too.
// With the long tag, 100 keys on every deployment (idempotency_long_test.go).
func TestIdempotencyRunsOnceAcrossInstances(t *testing.T) {
	runsOnce(t, redistest.Best(t), 30)
}

// runsOnce is TestIdempotencyRunsOnceAcrossInstances with keys keys, each
// sent 10 times, on the Redis of b.
func runsOnce(t *testing.T, b *redistest.Backend, keys int) {
	prefix := redistest.Prefix(t)
	var ran runs
	var serial atomic.Int64
	inv := &inventory{reserve: func(ctx context.Context, r *shoppb.ReserveRequest) (*shoppb.ReserveReply, error) {
		ran.add(incomingKey(ctx))
		n, _ := rand.Int(rand.Reader, big.NewInt(45))
		select { // the work: 5 to 50 ms, while the duplicates arrive
		case <-time.After(5*time.Millisecond + time.Duration(n.Int64())*time.Millisecond):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		fence, _ := lock.FencingToken(ctx)
		return &shoppb.ReserveReply{Left: serial.Add(1), Fence: fence}, nil
	}}
	var apps []*grpc.ClientConn
	for range 3 {
		// The engine's Timeout raised from 1s (and its ReplicaTimeout, for
		// sentinels, from 100ms), and a pool for every call at once: hundreds of calls at once on a loaded machine (-race)
		// may wait longer for Redis, and this test is about runs and
		// replies, not timeouts.
		rdb := b.UniversalWith(t, func(c *redisconf.Common) { *c.PoolSize = 4 * keys })
		apps = append(apps, idemServe(t, rdb, redisengine.Options{Prefix: prefix, Timeout: 10 * time.Second, ReplicaTimeout: 2 * time.Second}, interceptor.IdempotencyConfig{}, func(s *grpc.Server) {
			shoppb.RegisterInventoryServer(s, inv)
		}))
	}
	const dups = 10
	answers := make([][dups]answer[*shoppb.ReserveReply], keys)
	var wg sync.WaitGroup
	for k := range keys {
		for d := range dups {
			wg.Go(func() {
				answers[k][d] = reserve(apps[(k+d)%len(apps)], fmt.Sprintf("order-%d", k), &shoppb.ReserveRequest{ProductId: int64(k), Quantity: 1})
			})
		}
	}
	wg.Wait()
	for k := range keys {
		key := fmt.Sprintf("order-%d", k)
		if n := ran.get(key); n != 1 {
			t.Errorf("key %d: the handler ran %d times", k, n)
		}
		var first *shoppb.ReserveReply
		fresh := 0
		for d, a := range answers[k] {
			if a.err != nil {
				t.Errorf("key %d call %d: %v", k, d, a.err)
				continue
			}
			if !a.replayed {
				fresh++
			}
			if first == nil {
				first = a.reply
			} else if !proto.Equal(first, a.reply) {
				t.Errorf("key %d call %d: reply %v, another call got %v", k, d, a.reply, first)
			}
		}
		if fresh != 1 {
			t.Errorf("key %d: %d replies not marked as replays, want 1", k, fresh)
		}
		again := reserve(apps[k%len(apps)], key, &shoppb.ReserveRequest{ProductId: int64(k), Quantity: 1})
		if again.err != nil || !again.replayed || !proto.Equal(again.reply, first) {
			t.Errorf("key %d: a retry after the duplicates got %v, %v, replayed %v; want %v, replayed", k, again.reply, again.err, again.replayed, first)
		}
	}
	if n := serial.Load(); n != int64(keys) {
		t.Errorf("%d handler runs, want %d", n, keys)
	}
}

// TestIdempotencyMisuse: a key is scoped by caller and method; the same key
// with another payload is refused; a missing or malformed key is refused
// before the handler runs, unless Optional; a failing Caller refuses.
// No refusal repeats the key or the payload.
func TestIdempotencyMisuse(t *testing.T) {
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	var ran runs
	var serial atomic.Int64
	register := func(s *grpc.Server) {
		shoppb.RegisterInventoryServer(s, &inventory{reserve: func(ctx context.Context, r *shoppb.ReserveRequest) (*shoppb.ReserveReply, error) {
			ran.add("reserve")
			return &shoppb.ReserveReply{Left: serial.Add(1)}, nil
		}})
		shoppb.RegisterOrdersServer(s, &orders{create: func(ctx context.Context, r *shoppb.CreateOrderRequest) (*shoppb.CreateOrderReply, error) {
			ran.add("create")
			return &shoppb.CreateOrderReply{OrderId: fmt.Sprint(serial.Add(1))}, nil
		}})
	}
	// The caller is who the server says (here a stand-in: x-user metadata).
	caller := func(ctx context.Context) (string, error) {
		vs := metadata.ValueFromIncomingContext(ctx, "x-user")
		if len(vs) != 1 {
			return "", errors.New("no user")
		}
		return vs[0], nil
	}
	cc := idemServe(t, b.Universal(t), redisengine.Options{Prefix: prefix}, interceptor.IdempotencyConfig{Caller: caller}, register)
	const key = "key-4f2a-secret"
	req := &shoppb.ReserveRequest{ProductId: 31337, Quantity: 2}

	a := reserve(cc, key, req, "x-user", "alice")
	bob := reserve(cc, key, req, "x-user", "bob")
	if a.err != nil || bob.err != nil || a.replayed || bob.replayed || proto.Equal(a.reply, bob.reply) || ran.get("reserve") != 2 {
		t.Fatalf("two callers, one key: %v %v (replayed %v %v), %d runs; want two runs, two replies",
			a.reply, bob.reply, a.replayed, bob.replayed, ran.get("reserve"))
	}
	if r := reserve(cc, key, req, "x-user", "alice"); r.err != nil || !r.replayed || !proto.Equal(r.reply, a.reply) {
		t.Errorf("alice's retry: %v %v replayed %v; want her reply, replayed", r.reply, r.err, r.replayed)
	}
	o := createOrder(cc, key, &shoppb.CreateOrderRequest{}, "x-user", "alice")
	if o.err != nil || o.replayed || ran.get("create") != 1 {
		t.Errorf("the key on another method: %v %v replayed %v, %d runs; want a run of its own", o.reply, o.err, o.replayed, ran.get("create"))
	}

	refused := func(name string, r answer[*shoppb.ReserveReply], code codes.Code, reason string) {
		t.Helper()
		s := status.Convert(r.err)
		if s.Code() != code || r.reply != nil {
			t.Errorf("%s: %v %v, want %v", name, r.reply, r.err, code)
		}
		var got string
		for _, d := range s.Details() {
			if e, ok := d.(*errdetails.ErrorInfo); ok {
				got = e.Reason
			}
		}
		if got != reason {
			t.Errorf("%s: ErrorInfo reason %q, want %q", name, got, reason)
		}
		for _, leak := range []string{key, "31337", "alice"} {
			if strings.Contains(s.Message(), leak) {
				t.Errorf("%s: message %q repeats %q", name, s.Message(), leak)
			}
		}
	}
	runsBefore := ran.get("reserve")
	other := &shoppb.ReserveRequest{ProductId: 31337, Quantity: 3}
	refused("other payload", reserve(cc, key, other, "x-user", "alice"), codes.FailedPrecondition, "IDEMPOTENCY_KEY_REUSED")
	refused("no key", reserve(cc, "", req, "x-user", "alice"), codes.InvalidArgument, "")
	refused("no caller", reserve(cc, "key-fresh", req), codes.Unauthenticated, "")
	for _, bad := range []string{strings.Repeat("k", 256), "a b", `"open`, `""`, `"a"b"`} {
		refused(fmt.Sprintf("key %q", bad), reserve(cc, bad, req, "x-user", "alice"), codes.InvalidArgument, "")
	}
	refused("two keys", reserve(cc, "", req, "x-user", "alice", "idempotency-key", "k1", "idempotency-key", "k2"), codes.InvalidArgument, "")
	if n := ran.get("reserve"); n != runsBefore {
		t.Errorf("the handler ran %d times for refused calls", n-runsBefore)
	}
	if r := reserve(cc, `"`+key+`"`, req, "x-user", "alice"); r.err != nil || !r.replayed || !proto.Equal(r.reply, a.reply) {
		t.Errorf("the key quoted: %v %v replayed %v; want alice's reply, replayed", r.reply, r.err, r.replayed)
	}

	opt := idemServe(t, b.Universal(t), redisengine.Options{Prefix: prefix}, interceptor.IdempotencyConfig{Optional: true}, register)
	for i := 1; i <= 2; i++ {
		if r := reserve(opt, "", req); r.err != nil || r.replayed || ran.get("reserve") != runsBefore+i {
			t.Errorf("Optional, no key, call %d: %v replayed %v, %d runs; want a run each", i, r.err, r.replayed, ran.get("reserve")-runsBefore)
		}
	}
}

// TestIdempotencyErrors: a handler's error status is stored, details
// included, and replayed; an error of a handler interrupted by its
// context's end, an Unavailable one and nothing else, is not stored and
// its retry runs; a panic stores Internal.
func TestIdempotencyErrors(t *testing.T) {
	b := redistest.Best(t)
	var ran runs
	returned := make(chan struct{}, 1)
	register := func(s *grpc.Server) {
		shoppb.RegisterInventoryServer(s, &inventory{reserve: func(ctx context.Context, r *shoppb.ReserveRequest) (*shoppb.ReserveReply, error) {
			n := ran.add(incomingKey(ctx))
			switch r.ProductId {
			case 1: // out of stock: an answer
				st, _ := status.New(codes.FailedPrecondition, "out of stock").WithDetails(&errdetails.ErrorInfo{Reason: "OUT_OF_STOCK", Domain: "shop"})
				return nil, st.Err()
			case 2: // first run interrupted by the caller's deadline
				if n == 1 {
					defer func() { returned <- struct{}{} }()
					<-ctx.Done()
					return nil, status.FromContextError(ctx.Err()).Err()
				}
			case 3: // first run could not be done
				if n == 1 {
					return nil, status.Error(codes.Unavailable, "warehouse down")
				}
			case 4:
				panic("handler bug")
			}
			return &shoppb.ReserveReply{Left: int64(n)}, nil
		}})
	}
	recovered := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (reply any, err error) {
		defer func() {
			if recover() != nil {
				err = status.Error(codes.Internal, "panic")
			}
		}()
		return handler(ctx, req)
	}
	cc := idemServe(t, b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)}, interceptor.IdempotencyConfig{}, register, recovered)

	first := reserve(cc, "stock", &shoppb.ReserveRequest{ProductId: 1})
	again := reserve(cc, "stock", &shoppb.ReserveRequest{ProductId: 1})
	if status.Code(first.err) != codes.FailedPrecondition || first.replayed {
		t.Errorf("out of stock: %v replayed %v", first.err, first.replayed)
	}
	if !proto.Equal(status.Convert(first.err).Proto(), status.Convert(again.err).Proto()) || !again.replayed || ran.get("stock") != 1 {
		t.Errorf("out of stock, retried: %v replayed %v, %d runs; want %v replayed, one run", status.Convert(again.err).Proto(), again.replayed, ran.get("stock"), status.Convert(first.err).Proto())
	}

	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "slow"), 200*time.Millisecond)
	_, err := shoppb.NewInventoryClient(cc).Reserve(ctx, &shoppb.ReserveRequest{ProductId: 2})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call past its deadline: %v", err)
	}
	<-returned
	if r := reserve(cc, "slow", &shoppb.ReserveRequest{ProductId: 2}); r.err != nil || r.replayed || r.reply.GetLeft() != 2 {
		t.Errorf("the retry of an interrupted call: %v %v replayed %v; want the second run's reply", r.reply, r.err, r.replayed)
	}

	if r := reserve(cc, "down", &shoppb.ReserveRequest{ProductId: 3}); status.Code(r.err) != codes.Unavailable {
		t.Errorf("an Unavailable handler: %v", r.err)
	}
	if r := reserve(cc, "down", &shoppb.ReserveRequest{ProductId: 3}); r.err != nil || r.replayed || r.reply.GetLeft() != 2 {
		t.Errorf("the retry of an Unavailable call: %v %v replayed %v; want the second run's reply", r.reply, r.err, r.replayed)
	}
	if r := reserve(cc, "down", &shoppb.ReserveRequest{ProductId: 3}); r.err != nil || !r.replayed || r.reply.GetLeft() != 2 {
		t.Errorf("the retry after it: %v %v replayed %v; want the second run's reply, replayed", r.reply, r.err, r.replayed)
	}

	if r := reserve(cc, "bug", &shoppb.ReserveRequest{ProductId: 4}); status.Code(r.err) != codes.Internal || r.replayed {
		t.Errorf("a panicking handler: %v replayed %v", r.err, r.replayed)
	}
	if r := reserve(cc, "bug", &shoppb.ReserveRequest{ProductId: 4}); status.Code(r.err) != codes.Internal || !r.replayed || ran.get("bug") != 1 {
		t.Errorf("the retry of a panicked call: %v replayed %v, %d runs; want Internal replayed, one run", r.err, r.replayed, ran.get("bug"))
	}
}

// TestIdempotencyMaxStored: a reply over MaxStored goes out whole and is
// not stored: its retry is refused, marked as a replay, and the handler
// does not run again; a reply within it is stored.
func TestIdempotencyMaxStored(t *testing.T) {
	b := redistest.Best(t)
	var ran runs
	cc := idemServe(t, b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)}, interceptor.IdempotencyConfig{MaxStored: 64}, func(s *grpc.Server) {
		shoppb.RegisterOrdersServer(s, &orders{create: func(ctx context.Context, r *shoppb.CreateOrderRequest) (*shoppb.CreateOrderReply, error) {
			ran.add(incomingKey(ctx))
			return &shoppb.CreateOrderReply{OrderId: r.GetOrder().GetUserId() + "-order", Fence: 7}, nil
		}})
	})
	large := &shoppb.CreateOrderRequest{Order: &shoppb.Order{UserId: strings.Repeat("u", 100)}}
	first := createOrder(cc, "large", large)
	if first.err != nil || len(first.reply.GetOrderId()) != 106 {
		t.Fatalf("a large reply: %v %v", first.reply, first.err)
	}
	r := createOrder(cc, "large", large)
	var reason string
	for _, d := range status.Convert(r.err).Details() {
		if e, ok := d.(*errdetails.ErrorInfo); ok {
			reason = e.Reason
		}
	}
	if status.Code(r.err) != codes.FailedPrecondition || reason != "REPLY_NOT_STORED" || !r.replayed || ran.get("large") != 1 {
		t.Errorf("the retry of a reply not stored: %v (%s) replayed %v, %d runs; want FailedPrecondition REPLY_NOT_STORED, replayed, one run",
			r.err, reason, r.replayed, ran.get("large"))
	}
	small := &shoppb.CreateOrderRequest{Order: &shoppb.Order{UserId: "u"}}
	first = createOrder(cc, "small", small)
	if r := createOrder(cc, "small", small); r.err != nil || !r.replayed || !proto.Equal(r.reply, first.reply) || ran.get("small") != 1 {
		t.Errorf("a small reply, retried: %v %v replayed %v, %d runs", r.reply, r.err, r.replayed, ran.get("small"))
	}
}

// TestIdempotencyDescriptorOnly: a service whose reply type is only a
// descriptor in protoregistry.GlobalFiles (no generated Go type) is
// replayed as a dynamicpb message, on an instance that never ran it.
func TestIdempotencyDescriptorOnly(t *testing.T) {
	b := redistest.Best(t)
	prefix := redistest.Prefix(t)
	var ran atomic.Int64
	register := func(s *grpc.Server) {
		shop.Register(s, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			return shop.Set(shop.New("ReserveReply"), "left", ran.Add(1), "fence", int64(9)), nil
		}})
	}
	one := idemServe(t, b.Universal(t), redisengine.Options{Prefix: prefix}, interceptor.IdempotencyConfig{}, register)
	two := idemServe(t, b.Universal(t), redisengine.Options{Prefix: prefix}, interceptor.IdempotencyConfig{}, register)
	invoke := func(cc *grpc.ClientConn) (*dynamicpb.Message, bool, error) {
		ctx, cancel := idemCtx("dyn")
		defer cancel()
		reply := shop.New("ReserveReply")
		var hdr metadata.MD
		err := cc.Invoke(ctx, shop.Reserve, shop.Set(shop.New("ReserveRequest"), "product_id", int64(5)), reply, grpc.Header(&hdr))
		return reply, replayedMark(hdr), err
	}
	first, replayed, err := invoke(one)
	if err != nil || replayed {
		t.Fatalf("first call: %v replayed %v", err, replayed)
	}
	again, replayed, err := invoke(two)
	if err != nil || !replayed || !proto.Equal(first, again) || ran.Load() != 1 {
		t.Errorf("on the other instance: %v %v replayed %v, %d runs; want %v replayed, one run", again, err, replayed, ran.Load(), first)
	}
}

// TestIdempotencyConfig: bad configuration panics at construction.
func TestIdempotencyConfig(t *testing.T) {
	rdb := redistest.Best(t).Client(t)
	l := lock.New(rdb)
	t.Cleanup(func() { _ = l.Close() })
	for _, tc := range []struct {
		name string
		l    lifecycle.Locker
		c    interceptor.IdempotencyConfig
		ok   bool
	}{
		{"zero", l, interceptor.IdempotencyConfig{}, true},
		{"other key", l, interceptor.IdempotencyConfig{Metadata: "x-request-id"}, true},
		{"no results", lifecycle.Serve(struct{ lockcore.Engine }{new(locktest.Engine)}, nil), interceptor.IdempotencyConfig{}, false},
		{"upper case key", l, interceptor.IdempotencyConfig{Metadata: "Idempotency-Key"}, false},
		{"binary key", l, interceptor.IdempotencyConfig{Metadata: "key-bin"}, false},
		{"reserved key", l, interceptor.IdempotencyConfig{Metadata: "grpc-key"}, false},
		{"shared", l, interceptor.IdempotencyConfig{Policy: lifecycle.Policy{Share: 2}}, false},
		{"short keep", l, interceptor.IdempotencyConfig{Keep: time.Millisecond}, false},
		{"negative", l, interceptor.IdempotencyConfig{MaxStored: -1}, false},
		{"bad policy", l, interceptor.IdempotencyConfig{Policy: lifecycle.Policy{TTL: time.Millisecond}}, false},
	} {
		panicked := func() (p bool) {
			defer func() { p = recover() != nil }()
			interceptor.Idempotency(tc.l, tc.c)
			return false
		}()
		if panicked == tc.ok {
			t.Errorf("%s: panicked %v, want %v", tc.name, panicked, !tc.ok)
		}
	}
}

// TestIdempotencyInProgress: a duplicate whose wait runs out while the
// first call runs is refused with Aborted, as a busy lock is, with a
// RetryInfo, and the handler does not run for it; once the first call
// ends, a retry gets its reply.
func TestIdempotencyInProgress(t *testing.T) {
	b := redistest.Best(t)
	var ran runs
	entered, release := make(chan struct{}), make(chan struct{})
	cc := idemServe(t, b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)}, interceptor.IdempotencyConfig{Policy: lock.Wait(50 * time.Millisecond)}, func(s *grpc.Server) {
		shoppb.RegisterInventoryServer(s, &inventory{reserve: func(ctx context.Context, r *shoppb.ReserveRequest) (*shoppb.ReserveReply, error) {
			if ran.add(incomingKey(ctx)) == 1 {
				close(entered)
				<-release
			}
			return &shoppb.ReserveReply{Left: 1}, nil
		}})
	})
	firstDone := make(chan answer[*shoppb.ReserveReply])
	go func() { firstDone <- reserve(cc, "busy", &shoppb.ReserveRequest{ProductId: 1}) }()
	<-entered
	for _, dup := range []*shoppb.ReserveRequest{{ProductId: 1}, {ProductId: 2}} {
		r := reserve(cc, "busy", dup)
		s := status.Convert(r.err)
		var retry bool
		for _, d := range s.Details() {
			_, retry = d.(*errdetails.RetryInfo)
		}
		if s.Code() != codes.Aborted || !strings.Contains(s.Message(), "in progress") || !retry || r.replayed {
			t.Errorf("a duplicate (product %d) while the first runs: %v, RetryInfo %v, replayed %v; want Aborted in progress, with RetryInfo", dup.ProductId, r.err, retry, r.replayed)
		}
	}
	close(release)
	first := <-firstDone
	if first.err != nil || first.replayed {
		t.Fatalf("the first call: %v replayed %v", first.err, first.replayed)
	}
	if r := reserve(cc, "busy", &shoppb.ReserveRequest{ProductId: 1}); r.err != nil || !r.replayed || !proto.Equal(r.reply, first.reply) || ran.get("busy") != 1 {
		t.Errorf("the retry after it: %v %v replayed %v, %d runs", r.reply, r.err, r.replayed, ran.get("busy"))
	}
}

// TestIdempotencyUnavailable: with its Redis unreachable, a call fails with
// Unavailable, naming no address, and the handler does not run.
func TestIdempotencyUnavailable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	var ran runs
	register := func(s *grpc.Server) {
		shoppb.RegisterInventoryServer(s, &inventory{reserve: func(ctx context.Context, r *shoppb.ReserveRequest) (*shoppb.ReserveReply, error) {
			ran.add("reserve")
			return &shoppb.ReserveReply{}, nil
		}})
	}
	cc := idemServe(t, rdb, redisengine.Options{Prefix: redistest.Prefix(t)}, interceptor.IdempotencyConfig{}, register)
	r := reserve(cc, "k", &shoppb.ReserveRequest{ProductId: 1})
	if s := status.Convert(r.err); s.Code() != codes.Unavailable || strings.Contains(s.Message(), "127.0.0.1") || ran.get("reserve") != 0 {
		t.Errorf("Redis unreachable: %v, %d runs; want Unavailable, no address, no run", r.err, ran.get("reserve"))
	}

	// A Redis that takes connections and never answers, on a client of
	// one connection: while one call's lookup holds it, the next call's
	// lookup runs out of the engine's Timeout waiting for it, well within
	// the call's deadline, and that is Unavailable too, not the call's
	// DeadlineExceeded.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 1)
	var conns sync.WaitGroup
	conns.Go(func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	})
	t.Cleanup(func() { _ = mute.Close(); conns.Wait() })
	hung := redis.NewClient(&redis.Options{Addr: mute.Addr().String(), MaxRetries: -1, PoolSize: 1, ReadTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = hung.Close() })
	cc = idemServe(t, hung, redisengine.Options{Prefix: redistest.Prefix(t), Timeout: 200 * time.Millisecond}, interceptor.IdempotencyConfig{}, register)
	holder := make(chan answer[*shoppb.ReserveReply])
	go func() { holder <- reserve(cc, "k1", &shoppb.ReserveRequest{ProductId: 1}) }()
	<-accepted // the first lookup has the connection
	r = reserve(cc, "k2", &shoppb.ReserveRequest{ProductId: 1})
	if s := status.Convert(r.err); s.Code() != codes.Unavailable || ran.get("reserve") != 0 {
		t.Errorf("Redis busy and mute: %v, %d runs; want Unavailable, no run", r.err, ran.get("reserve"))
	}
	if r := <-holder; status.Code(r.err) != codes.Unavailable {
		t.Errorf("Redis mute: %v; want Unavailable", r.err)
	}
}
