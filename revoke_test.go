package lock_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// handled is what one handler saw: its fencing token and, once its context
// ended, the cause.
type handled struct {
	fence int64
	cause error
}

// TestForceReleaseEndToEnd: with go-redis at its defaults and the Locker's
// defaults, an operator's force-release of a lock held by an HTTP handler
// and by a gRPC handler cancels that handler's context with cause
// ErrRevoked, lets the next waiter, another instance's request, in with a
// greater fencing token, and leaves an audit record.
func TestForceReleaseEndToEnd(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		newLocker := func() *lock.Locker {
			rdb := b.Universal(t)
			l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix})
			t.Cleanup(func() { l.Close(); rdb.Close() })
			return l
		}
		// handler records what it saw; the first request of each test
		// holds until its context ends, the second returns at once.
		handler := func(started chan<- struct{}, out, nextOut chan<- handled) func(ctx context.Context, hold bool) {
			return func(ctx context.Context, hold bool) {
				f, _ := lock.FencingToken(ctx)
				if !hold {
					nextOut <- handled{fence: f}
					return
				}
				started <- struct{}{}
				select {
				case <-ctx.Done():
					out <- handled{fence: f, cause: context.Cause(ctx)}
				case <-time.After(20 * time.Second):
					out <- handled{fence: f, cause: errors.New("never cancelled")}
				}
			}
		}
		check := func(t *testing.T, op lockcore.Operator, key lockcore.Key, started <-chan struct{}, out, nextOut <-chan handled, second func()) {
			<-started
			waiterDone := make(chan struct{})
			go func() { defer close(waiterDone); second() }()
			// The second request queues behind the first.
			deadline := time.Now().Add(10 * time.Second)
			for {
				info, err := op.Inspect(context.Background(), key)
				if err != nil {
					t.Fatal(err)
				}
				if len(info.Waiters) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no waiter queued: %+v", info)
				}
				time.Sleep(5 * time.Millisecond) // polling an eventual state, bounded above
			}
			rev, err := op.Revoke(context.Background(), key, "end-to-end test")
			if err != nil {
				t.Fatal(err)
			}
			first := <-out
			if !errors.Is(first.cause, lockcore.ErrRevoked) || !errors.Is(first.cause, lockcore.ErrLockLost) {
				t.Errorf("holder's context ended with %v, want ErrRevoked", first.cause)
			}
			if first.fence != rev.Fence {
				t.Errorf("holder had fence %d, revocation names %d", first.fence, rev.Fence)
			}
			next := <-nextOut
			<-waiterDone
			if next.fence <= rev.NewFence-1 || next.fence <= first.fence {
				t.Errorf("next holder's fence %d, want > %d (revoked) and >= %d (the counter after the revocation)", next.fence, first.fence, rev.NewFence)
			}
			info, err := op.Inspect(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Audit) != 1 || info.Audit[0].Reason != "end-to-end test" || info.Audit[0].Fence != first.fence {
				t.Errorf("audit %+v, want the revocation of fence %d", info.Audit, first.fence)
			}
		}

		t.Run("http", func(t *testing.T) {
			started, out, nextOut := make(chan struct{}, 1), make(chan handled, 1), make(chan handled, 1)
			h := handler(started, out, nextOut)
			serve := func(l *lock.Locker) *httptest.Server {
				r := chi.NewRouter()
				r.With(l.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
					h(r.Context(), r.URL.Query().Get("hold") == "1")
				})
				srv := httptest.NewServer(r)
				t.Cleanup(srv.Close)
				return srv
			}
			a, bl := newLocker(), newLocker()
			sa, sb := serve(a), serve(bl)
			codes := make(chan int, 2)
			post := func(url string) {
				resp, err := http.Post(url, "", nil)
				if err != nil {
					t.Error(err)
					codes <- 0
					return
				}
				resp.Body.Close()
				codes <- resp.StatusCode
			}
			go post(sa.URL + "/products/42/buy?hold=1")
			key, _ := lockcore.NewKey("productID", "42")
			check(t, a.Operator(), key, started, out, nextOut, func() { post(sb.URL + "/products/42/buy") })
			for range 2 {
				if c := <-codes; c != http.StatusOK {
					t.Errorf("status %d, want 200 (the handler ran and returned)", c)
				}
			}
		})

		t.Run("grpc", func(t *testing.T) {
			started, out, nextOut := make(chan struct{}, 1), make(chan handled, 1), make(chan handled, 1)
			h := handler(started, out, nextOut)
			serve := func(l *lock.Locker) *grpc.ClientConn {
				addr := serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
					h(ctx, req.Get(req.Descriptor().Fields().ByName("quantity")).Int() == 1)
					return shop.New("ReserveReply"), nil
				}}, grpc.ChainUnaryInterceptor(unaryServer(l,
					interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID")))))
				return dial(t, addr)
			}
			a, bl := newLocker(), newLocker()
			ca, cb := serve(a), serve(bl)
			errs := make(chan error, 2)
			call := func(cc *grpc.ClientConn, hold int32) {
				req := shop.Set(shop.New("ReserveRequest"), "product_id", int64(43), "quantity", hold)
				errs <- cc.Invoke(context.Background(), shop.Reserve, req, shop.New("ReserveReply"))
			}
			go call(ca, 1)
			key, _ := lockcore.NewKey("productID", "43")
			check(t, a.Operator(), key, started, out, nextOut, func() { call(cb, 0) })
			for range 2 {
				if err := <-errs; err != nil {
					t.Errorf("call: %v, want OK (the handler ran and returned)", err)
				}
			}
		})
	})
}
