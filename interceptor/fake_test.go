package interceptor_test

// Tests of the interceptors on the in-memory engine (lockcore/locktest):
// no Redis, real grpc.Servers on loopback, judged by the status codes a
// client gets and by what the handler sees.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/middleware"
)

// fakeBound bounds every wait of these tests, so that a broken interceptor
// fails instead of hanging.
const fakeBound = 10 * time.Second

func fakeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), fakeBound)
	t.Cleanup(cancel)
	return ctx
}

func fakeKey(t *testing.T, parts ...string) lockcore.Key {
	t.Helper()
	k, err := lockcore.NewKey(parts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// fakeRig is a shop server on loopback behind the lock interceptors of one
// Config on engine e, and a client connection to it.
type fakeRig struct {
	cc *grpc.ClientConn
	// errs receives what the lock interceptor returned for each unary call
	// (an interceptor outside it records it): the server's answer, which a
	// client that went away cannot see.
	errs chan error
	// panics receives the value of each handler panic, recovered by an
	// interceptor outside the lock's.
	panics chan any
}

func newFakeRig(t *testing.T, e lifecycle.Locker, c interceptor.Config, srv *shop.Server) *fakeRig {
	t.Helper()
	rig := &fakeRig{errs: make(chan error, 64), panics: make(chan any, 4)}
	recoverer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if v := recover(); v != nil {
				rig.panics <- v
				resp, err = nil, status.Error(codes.Internal, "recovered")
			}
		}()
		return h(ctx, req)
	}
	recorder := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		select {
		case rig.errs <- err:
		default:
		}
		return resp, err
	}
	// A call with x-timeout metadata gets that deadline on the server, so
	// that the server's deadline, not the client's, ends it.
	deadline := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if vs := metadata.ValueFromIncomingContext(ctx, "x-timeout"); len(vs) == 1 {
			d, err := time.ParseDuration(vs[0])
			if err != nil {
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return h(ctx, req)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(recoverer, recorder, deadline, interceptor.UnaryServer(e, c)),
		grpc.ChainStreamInterceptor(interceptor.StreamServer(e, c)),
	)
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
	rig.cc = fakeDial(t, lis.Addr().String())
	return rig
}

// fakeDial connects to addr with the token-propagating client interceptors.
func fakeDial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClient()),
		grpc.WithChainStreamInterceptor(interceptor.StreamClient()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// serverErr returns the next error the lock interceptor returned.
func (rig *fakeRig) serverErr(t *testing.T) error {
	t.Helper()
	select {
	case err := <-rig.errs:
		return err
	case <-time.After(fakeBound):
		t.Fatal("no call reached the server")
		return nil
	}
}

func reserveReq(productID int64) *dynamicpb.Message {
	return shop.Set(shop.New("ReserveRequest"), "product_id", productID, "quantity", int32(1))
}

func createReq(userID string, productID int64) *dynamicpb.Message {
	return shop.Set(shop.New("CreateOrderRequest"), "order", shop.Set(shop.New("Order"), "user_id", userID, "product_id", productID))
}

func callReserve(ctx context.Context, cc *grpc.ClientConn, productID int64) (*dynamicpb.Message, error) {
	reply := shop.New("ReserveReply")
	err := cc.Invoke(ctx, shop.Reserve, reserveReq(productID), reply)
	return reply, err
}

func callCreate(ctx context.Context, cc *grpc.ClientConn, userID string, productID int64) (*dynamicpb.Message, error) {
	reply := shop.New("CreateOrderReply")
	err := cc.Invoke(ctx, shop.Create, createReq(userID, productID), reply)
	return reply, err
}

// restock sends the messages of one Restock stream and returns the reply.
func restock(ctx context.Context, cc *grpc.ClientConn, productIDs ...int64) (*dynamicpb.Message, error) {
	cs, err := cc.NewStream(ctx, shop.RestockDesc, shop.Restock)
	if err != nil {
		return nil, err
	}
	for _, id := range productIDs {
		if err := cs.SendMsg(reserveReq(id)); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	if err := cs.CloseSend(); err != nil {
		return nil, err
	}
	reply := shop.New("ReserveReply")
	return reply, cs.RecvMsg(reply)
}

func codeOf(err error) codes.Code { return status.Code(err) }

// fencedReserve answers Reserve with the fencing token of its context and
// counts its runs.
func fencedReserve(runs *atomic.Int32) func(context.Context, *dynamicpb.Message) (*dynamicpb.Message, error) {
	return func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		runs.Add(1)
		f, _ := enginetest.Fence(ctx)
		return shop.Set(shop.New("ReserveReply"), "fence", f), nil
	}
}

// TestFakeRulePolicies: Rule.Policy reaches the engine as it was given,
// with the call's full method as its Route, for unary calls and for a
// stream whose key is in its first message.
func TestFakeRulePolicies(t *testing.T) {
	e := newFake()
	var runs atomic.Int32
	rig := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{
		{Method: shop.Reserve, Key: interceptor.Field("product_id")},
		{Method: shop.Create, Key: interceptor.Field("order.user_id"), Policy: lifecycle.Policy{Wait: lockcore.FailFast, TTL: 2 * time.Second}},
		{Method: shop.Restock, Key: interceptor.Field("product_id"), Policy: lifecycle.Policy{Wait: 3 * time.Second, TTL: 30 * time.Millisecond}},
	}}, &shop.Server{
		Reserve: fencedReserve(&runs),
		Create: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			return shop.New("CreateOrderReply"), nil
		},
		Restock: func(ss grpc.ServerStream) error {
			if err := ss.RecvMsg(shop.New("ReserveRequest")); err != nil {
				return err
			}
			return ss.SendMsg(shop.New("ReserveReply"))
		},
	})
	if _, err := callReserve(fakeCtx(t), rig.cc, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := callCreate(fakeCtx(t), rig.cc, "u7", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := restock(fakeCtx(t), rig.cc, 3); err != nil {
		t.Fatal(err)
	}
	want := []call{
		{Key: fakeKey(t, "product_id", "1"), Policy: lifecycle.Policy{Route: shop.Reserve}},
		{Key: fakeKey(t, "order.user_id", "u7"), Policy: lifecycle.Policy{Wait: lockcore.FailFast, TTL: 2 * time.Second, Route: shop.Create}},
		{Key: fakeKey(t, "product_id", "3"), Policy: lifecycle.Policy{Wait: 3 * time.Second, TTL: 30 * time.Millisecond, Route: shop.Restock}},
	}
	if got := e.Calls(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the engine was called with\n%+v\nwant\n%+v", got, want)
	}

	// Under a wildcard rule, and for a stream locked before its handler
	// runs (a metadata key), the Route is the method called, not the rule.
	e = newFake()
	rig = newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{
		{Method: "*", Key: interceptor.Metadata("x-tenant")},
	}}, &shop.Server{
		Reserve: fencedReserve(&runs),
		Restock: func(ss grpc.ServerStream) error {
			if err := ss.RecvMsg(shop.New("ReserveRequest")); err != nil {
				return err
			}
			return ss.SendMsg(shop.New("ReserveReply"))
		},
	})
	mctx := metadata.AppendToOutgoingContext(fakeCtx(t), "x-tenant", "t1")
	if _, err := callReserve(mctx, rig.cc, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := restock(mctx, rig.cc, 3); err != nil {
		t.Fatal(err)
	}
	want = []call{
		{Key: fakeKey(t, "x-tenant", "t1"), Policy: lifecycle.Policy{Route: shop.Reserve}},
		{Key: fakeKey(t, "x-tenant", "t1"), Policy: lifecycle.Policy{Route: shop.Restock}},
	}
	if got := e.Calls(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("under a wildcard rule the engine was called with\n%+v\nwant\n%+v", got, want)
	}
}

// TestFakeCodes: a missing key is InvalidArgument, a busy lock Aborted with
// a RetryInfo of the engine's first hint, 100 ms (fail fast and after a wait),
// an unreachable engine Unavailable, a caller that goes away or whose
// deadline passes while waiting Canceled or DeadlineExceeded with nothing
// left queued, an exact rule whose key does not apply Internal; the handler
// runs in none of these cases.
func TestFakeCodes(t *testing.T) {
	e := newFake()
	var runs atomic.Int32
	srv := &shop.Server{
		Reserve: fencedReserve(&runs),
		Create: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			runs.Add(1)
			return shop.New("CreateOrderReply"), nil
		},
	}
	failFast := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{
		{Method: shop.Reserve, Key: interceptor.Field("product_id"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}},
		{Method: shop.Create, Key: interceptor.Field("order.product_id").As("product_id"), Policy: lifecycle.Policy{Wait: 50 * time.Millisecond}},
	}}, srv)
	waiting := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{
		{Method: shop.Reserve, Key: interceptor.Field("product_id"), Policy: lifecycle.Policy{Wait: time.Hour}},
		{Method: shop.Create, Key: interceptor.Field("product_id")}, // CreateOrderRequest has no product_id
	}}, srv)
	k := fakeKey(t, "product_id", "42")

	if _, err := callReserve(fakeCtx(t), failFast.cc, 0); codeOf(err) != codes.InvalidArgument {
		t.Errorf("missing key: %v, want InvalidArgument", err)
	}
	if _, err := callCreate(fakeCtx(t), waiting.cc, "u7", 42); codeOf(err) != codes.Internal {
		t.Errorf("exact rule whose key does not apply: %v, want Internal", err)
	}

	holder, err := e.Acquire(fakeCtx(t), k, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	retryDelay := func(err error) time.Duration {
		for _, d := range status.Convert(err).Details() {
			if r, ok := d.(*errdetails.RetryInfo); ok {
				return r.RetryDelay.AsDuration()
			}
		}
		return 0
	}
	if _, err := callReserve(fakeCtx(t), failFast.cc, 42); codeOf(err) != codes.Aborted || retryDelay(err) != 100*time.Millisecond {
		t.Errorf("busy, fail fast: %v (RetryInfo %v), want Aborted with 100ms (no hold ended yet)", err, retryDelay(err))
	}
	if _, err := callCreate(fakeCtx(t), failFast.cc, "u7", 42); codeOf(err) != codes.Aborted || retryDelay(err) != 100*time.Millisecond {
		t.Errorf("busy, wait ran out: %v (RetryInfo %v), want Aborted with 100ms (no hold ended yet)", err, retryDelay(err))
	}

	// Canceled while waiting: the server answers Canceled and dequeues.
	for len(waiting.errs) > 0 {
		<-waiting.errs
	}
	ctx, cancel := context.WithCancel(fakeCtx(t))
	gone := make(chan error, 1)
	go func() {
		_, err := callReserve(ctx, waiting.cc, 42)
		gone <- err
	}()
	if err := e.Await(fakeCtx(t), func() bool { return e.Waiters(k) == 1 }); err != nil {
		t.Fatalf("the call never queued: %v", err)
	}
	cancel()
	if err := <-gone; codeOf(err) != codes.Canceled {
		t.Errorf("client of a cancelled wait: %v", err)
	}
	if err := waiting.serverErr(t); codeOf(err) != codes.Canceled {
		t.Errorf("server answer to a cancelled wait: %v, want Canceled", err)
	}
	if n := e.Waiters(k); n != 0 {
		t.Fatalf("%d waiters after the caller went away", n)
	}

	// The deadline passes while waiting: DeadlineExceeded, dequeued. The
	// server's deadline is the shorter, so that the client gets its answer.
	dctx := metadata.AppendToOutgoingContext(fakeCtx(t), "x-timeout", "100ms")
	if _, err := callReserve(dctx, waiting.cc, 42); codeOf(err) != codes.DeadlineExceeded {
		t.Errorf("client of a wait past its deadline: %v", err)
	}
	if err := waiting.serverErr(t); codeOf(err) != codes.DeadlineExceeded {
		t.Errorf("server answer to a wait past its deadline: %v, want DeadlineExceeded", err)
	}
	if err := e.Await(fakeCtx(t), func() bool { return e.Waiters(k) == 0 }); err != nil {
		t.Fatalf("a waiter is left after the deadline: %v", err)
	}

	e.SetUnavailable(true)
	if _, err := callReserve(fakeCtx(t), failFast.cc, 7); codeOf(err) != codes.Unavailable {
		t.Errorf("engine down: %v, want Unavailable", err)
	}
	e.SetUnavailable(false)

	if n := runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for refused calls", n)
	}
	if fence, _ := e.Held(k); fence != holder.Fence() {
		t.Fatalf("fence %d, want the holder's %d", fence, holder.Fence())
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	reply, err := callReserve(fakeCtx(t), failFast.cc, 42)
	if err != nil || shop.Int(reply, "fence") != holder.Fence()+1 || runs.Load() != 1 {
		t.Fatalf("free lock: %v, fence %d", err, shop.Int(reply, "fence"))
	}
}

// TestFakeUnaryPropagation: a handler holding product_id:42 calls a method
// of a second server on the same resource through interceptor.UnaryClient
// and re-enters there (same fencing token, one more entry of the hold);
// a server whose TrustToken refuses the caller answers Aborted (fail fast)
// or queues the call behind its own caller (waiting).
func TestFakeUnaryPropagation(t *testing.T) {
	e := newFake()
	k := fakeKey(t, "product_id", "42")
	var innerRuns atomic.Int32
	inner := &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		innerRuns.Add(1)
		f, _ := enginetest.Fence(ctx)
		_, entries := e.Held(k)
		return shop.Set(shop.New("ReserveReply"), "fence", f, "left", int64(entries)), nil
	}}
	rule := interceptor.Rule{Method: shop.Reserve, Key: interceptor.Field("product_id"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}}
	trusting := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{rule}}, inner)
	never := func(context.Context, string) bool { return false }
	untrusting := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{rule}, TrustToken: never}, inner)
	rule.Policy.Wait = time.Hour
	untrustingWait := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{rule}, TrustToken: never}, inner)

	// The outer service: Create on order.product_id, calling Reserve on the
	// connection named by the order's user_id, with a cancellable context
	// whose cancel it sends on cancels.
	conns := map[string]*grpc.ClientConn{"trusting": trusting.cc, "untrusting": untrusting.cc, "untrusting-wait": untrustingWait.cc}
	cancels := make(chan context.CancelFunc, 1)
	proceed := make(chan struct{})
	outer := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{
		{Method: shop.Create, Key: interceptor.Field("order.product_id").As("product_id"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}},
	}}, &shop.Server{Create: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		order := req.Get(req.Descriptor().Fields().ByName("order")).Message().Interface()
		f, _ := enginetest.Fence(ctx)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if shop.String(order, "user_id") == "untrusting-wait" {
			cancels <- cancel
		}
		reply, err := callReserve(ctx, conns[shop.String(order, "user_id")], shop.Int(order, "product_id"))
		if shop.String(order, "user_id") == "untrusting-wait" {
			// Hold on until the test saw the inner call leave the queue:
			// returning releases the lock, which would grant it to the
			// inner call if its server had not yet seen the cancellation.
			select {
			case <-proceed:
			case <-time.After(fakeBound):
			}
		}
		return shop.Set(shop.New("CreateOrderReply"), "fence", f, "order_id",
			fmt.Sprintf("%v %d %d", codeOf(err), shop.Int(reply, "fence"), shop.Int(reply, "left"))), nil
	}})

	reply, err := callCreate(fakeCtx(t), outer.cc, "trusting", 42)
	if err != nil {
		t.Fatal(err)
	}
	fence := shop.Int(reply, "fence")
	if want := fmt.Sprintf("OK %d 2", fence); fence == 0 || shop.String(reply, "order_id") != want {
		t.Fatalf("nested call: %q (code, inner fence, entries), want %q", shop.String(reply, "order_id"), want)
	}
	if _, entries := e.Held(k); entries != 0 {
		t.Fatal("the lock outlived the nested calls")
	}

	runs := innerRuns.Load()
	reply, err = callCreate(fakeCtx(t), outer.cc, "untrusting", 42)
	if err != nil || shop.String(reply, "order_id") != "Aborted 0 0" {
		t.Fatalf("untrusted nested call: %v %q, want Aborted", err, shop.String(reply, "order_id"))
	}

	done := make(chan *dynamicpb.Message, 1)
	go func() {
		reply, err := callCreate(fakeCtx(t), outer.cc, "untrusting-wait", 42)
		if err != nil {
			t.Error(err)
		}
		done <- reply
	}()
	cancelInner := <-cancels
	if err := e.Await(fakeCtx(t), func() bool { return e.Waiters(k) == 1 }); err != nil {
		t.Fatalf("the untrusted inner call did not queue: %v", err)
	}
	if _, entries := e.Held(k); entries != 1 {
		t.Fatalf("%d entries: the untrusted call entered", entries)
	}
	cancelInner()
	if err := e.Await(fakeCtx(t), func() bool { return e.Waiters(k) == 0 }); err != nil {
		t.Fatalf("the cancelled inner call is still queued: %v", err)
	}
	close(proceed)
	if got := shop.String(<-done, "order_id"); got != "Canceled 0 0" {
		t.Fatalf("cancelled untrusted inner call: %q", got)
	}
	if err := e.Await(fakeCtx(t), func() bool { _, n := e.Held(k); return n == 0 && e.Waiters(k) == 0 }); err != nil {
		t.Fatalf("left behind: %v", err)
	}
	if innerRuns.Load() != runs {
		t.Fatal("an untrusted inner call ran its handler")
	}
}

// TestFakeCrossProtocol: an HTTP handler holding productID:42 calls a gRPC
// method that locks the same resource (Field("product_id").As("productID"))
// and re-enters there, and a gRPC handler holding it calls an HTTP route on
// it through middleware.Transport and re-enters there: one hold, one
// fencing token, across protocols.
func TestFakeCrossProtocol(t *testing.T) {
	e := newFake()
	k := fakeKey(t, "productID", "42")
	rpc := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{
		{Method: shop.Reserve, Key: interceptor.Field("product_id").As("productID"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}},
	}}, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		f, _ := enginetest.Fence(ctx)
		_, entries := e.Held(k)
		return shop.Set(shop.New("ReserveReply"), "fence", f, "left", int64(entries)), nil
	}})

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: middleware.Transport(tr), Timeout: fakeBound}
	lockHTTP := middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}})
	r := chi.NewRouter()
	r.With(lockHTTP).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		f, _ := enginetest.Fence(r.Context())
		reply, err := callReserve(r.Context(), rpc.cc, 42)
		fmt.Fprintf(w, "%d %v %d %d", f, codeOf(err), shop.Int(reply, "fence"), shop.Int(reply, "left"))
	})
	r.With(lockHTTP).Get("/products/{productID}/stock", func(w http.ResponseWriter, r *http.Request) {
		f, _ := enginetest.Fence(r.Context())
		_, entries := e.Held(k)
		fmt.Fprintf(w, "%d %d", f, entries)
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	// HTTP → gRPC.
	req, _ := http.NewRequestWithContext(fakeCtx(t), "POST", srv.URL+"/products/42/buy", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var outerFence, innerFence, entries int64
	var code string
	if _, err := fmt.Sscanf(string(body), "%d %s %d %d", &outerFence, &code, &innerFence, &entries); err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTP → gRPC: %d %q", resp.StatusCode, body)
	}
	if code != "OK" || outerFence == 0 || innerFence != outerFence || entries != 2 {
		t.Fatalf("HTTP → gRPC: outer fence %d, inner %s fence %d with %d entries; want OK, the same fence, 2 entries", outerFence, code, innerFence, entries)
	}

	// gRPC → HTTP.
	rpc2 := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{
		{Method: shop.Create, Key: interceptor.Field("order.product_id").As("productID"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}},
	}}, &shop.Server{Create: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		f, _ := enginetest.Fence(ctx)
		hreq, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/products/42/stock", nil)
		resp, err := hc.Do(hreq)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return shop.Set(shop.New("CreateOrderReply"), "fence", f, "order_id", strconv.Itoa(resp.StatusCode)+" "+string(b)), nil
	}})
	reply, err := callCreate(fakeCtx(t), rpc2.cc, "u7", 42)
	if err != nil {
		t.Fatal(err)
	}
	f := shop.Int(reply, "fence")
	if want := fmt.Sprintf("200 %d 2", f); f == 0 || shop.String(reply, "order_id") != want {
		t.Fatalf("gRPC → HTTP: %q (status, inner fence, entries), want %q", shop.String(reply, "order_id"), want)
	}
	if _, entries := e.Held(k); entries != 0 {
		t.Fatal("the lock outlived the nested calls")
	}
}

// TestFakeUnaryLeaseLost: a lease lost while the handler runs cancels the
// handler's context with a cause matching lockcore.ErrLockLost.
func TestFakeUnaryLeaseLost(t *testing.T) {
	e := newFake()
	k := fakeKey(t, "product_id", "5")
	started := make(chan struct{})
	rig := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{
		{Method: shop.Reserve, Key: interceptor.Field("product_id"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}},
	}}, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		close(started)
		select {
		case <-ctx.Done():
		case <-time.After(fakeBound):
			return nil, status.Error(codes.Internal, "context not cancelled")
		}
		if cause := context.Cause(ctx); !errors.Is(cause, lockcore.ErrLockLost) {
			return nil, status.Errorf(codes.Internal, "cause %v", cause)
		}
		if _, ok := enginetest.Fence(ctx); ok {
			return nil, status.Error(codes.Internal, "a lost lock still has a fencing token")
		}
		return shop.New("ReserveReply"), nil
	}})
	done := make(chan error, 1)
	go func() {
		_, err := callReserve(fakeCtx(t), rig.cc, 5)
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(fakeBound):
		t.Fatal("the handler never started")
	}
	if !e.Lose(k) {
		t.Fatal("no hold to lose")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestFakeUnaryPanicReleases: a panicking handler releases the lock before
// the panic goes on up the chain (to a recovering interceptor outside the
// lock's), and the next call gets the lock.
func TestFakeUnaryPanicReleases(t *testing.T) {
	e := newFake()
	k := fakeKey(t, "product_id", "9")
	var runs atomic.Int32
	rig := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{
		{Method: shop.Reserve, Key: interceptor.Field("product_id"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}},
	}}, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		return shop.New("ReserveReply"), nil
	}})
	if _, err := callReserve(fakeCtx(t), rig.cc, 9); codeOf(err) != codes.Internal {
		t.Fatalf("panicking handler: %v", err)
	}
	if v := <-rig.panics; v != "boom" {
		t.Fatalf("recovered %v", v)
	}
	if _, entries := e.Held(k); entries != 0 {
		t.Fatal("the lock outlived the panic")
	}
	if _, err := callReserve(fakeCtx(t), rig.cc, 9); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
}
