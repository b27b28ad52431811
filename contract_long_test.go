//go:build long

package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestStreamReentryAndLoss: a stream locked on its first message
// gives its handler an ordinary context with a hold slot. From contexts
// derived from it, one of them derived before the lock was taken:
//   - FencingToken and lock.Keys see the lock once it is held;
//   - an in-memory acquisition of the same key re-enters (same fence, no
//     wait), through the Locker's engine and through another Locker made
//     with lock.FromEngine on the same engine (an HTTP route called in
//     process);
//   - a nested unary gRPC call on the same key, with the owner tokens
//     propagated by interceptor.UnaryClient, re-enters;
//   - when the lease is lost (its key deleted behind the holder's back),
//     the handler's context and the one derived before the lock are
//     cancelled with cause ErrLockLost.
func TestStreamReentryAndLoss(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		rdb := b.Universal(t)
		l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix}, lock.Defaults(lock.TTL(300*time.Millisecond)))
		defer l.Close()
		other := lock.FromEngine(l.Backend(), lock.Defaults(lock.FailFast(), lock.TTL(300*time.Millisecond)))
		k := key(t, "product_id", "42")

		var unaryFence atomic.Int64
		var selfAddr atomic.Value
		httpRoute := chi.NewRouter()
		httpRoute.With(other.By(keyfunc.Param("productID").As("product_id"))).Post("/products/{productID}/reserve",
			func(w http.ResponseWriter, r *http.Request) {
				f, _ := lock.FencingToken(r.Context())
				fmt.Fprint(w, f)
			})

		problems := make(chan []string, 1)
		gsrv := &shop.Server{
			Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
				f, _ := lock.FencingToken(ctx)
				unaryFence.Store(f)
				return shop.New("ReserveReply"), nil
			},
			Restock: func(ss grpc.ServerStream) error {
				var p []string
				defer func() { problems <- p }()
				pre, cancelPre := context.WithCancel(ss.Context())
				defer cancelPre()
				if _, ok := lock.FencingToken(pre); ok {
					p = append(p, "fencing token before the first message")
				}
				if err := ss.RecvMsg(shop.New("ReserveRequest")); err != nil {
					p = append(p, "first RecvMsg: "+err.Error())
					return err
				}
				fence, ok := lock.FencingToken(ss.Context())
				if !ok {
					p = append(p, "no fencing token after the first message")
				}
				if f, _ := lock.FencingToken(pre); f != fence {
					p = append(p, fmt.Sprintf("context derived before the lock: fence %d, want %d", f, fence))
				}
				if ks := lock.Keys(pre); len(ks) != 1 || ks[0] != "product_id:42" {
					p = append(p, fmt.Sprintf("context derived before the lock holds %v", ks))
				}

				// In memory, through the Locker's own engine.
				dctx, cancelD := context.WithTimeout(ss.Context(), testBound)
				defer cancelD()
				inner, err := l.Acquire(dctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
				switch {
				case err != nil:
					p = append(p, "engine re-entry from a derived context: "+err.Error())
				case inner.Fence() != fence:
					p = append(p, fmt.Sprintf("engine re-entry: fence %d, want %d", inner.Fence(), fence))
				}
				if inner != nil {
					_ = inner.Release(dctx)
				}
				// In process, through another Locker on the same engine.
				rec := httptest.NewRecorder()
				req := httptest.NewRequest("POST", "/products/42/reserve", nil).WithContext(dctx)
				httpRoute.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK || rec.Body.String() != fmt.Sprint(fence) {
					p = append(p, fmt.Sprintf("FromEngine route from the stream's context: %d %q, want 200 %d", rec.Code, rec.Body.String(), fence))
				}
				// A nested unary call, tokens propagated.
				ncc, err := grpc.NewClient(selfAddr.Load().(string), grpc.WithTransportCredentials(insecure.NewCredentials()),
					grpc.WithChainUnaryInterceptor(interceptor.UnaryClient()))
				if err != nil {
					p = append(p, err.Error())
				} else {
					if _, err := reserve(dctx, ncc, 42); err != nil {
						p = append(p, "nested unary call on the same key: "+err.Error())
					} else if unaryFence.Load() != fence {
						p = append(p, fmt.Sprintf("nested unary call: fence %d, want %d", unaryFence.Load(), fence))
					}
					ncc.Close()
				}
				if ss.Context().Err() != nil {
					p = append(p, "the stream's context ended while re-entering: "+context.Cause(ss.Context()).Error())
				}

				// The lease is lost: someone deletes the key.
				if err := rdb.Del(context.Background(), prefix+"{product_id:42}").Err(); err != nil {
					p = append(p, err.Error())
				}
				for name, c := range map[string]context.Context{"handler's": ss.Context(), "derived before the lock": pre} {
					select {
					case <-c.Done():
						if cause := context.Cause(c); !errors.Is(cause, lockcore.ErrLockLost) {
							p = append(p, fmt.Sprintf("%s context cancelled with cause %v, want ErrLockLost", name, cause))
						}
					case <-time.After(testBound):
						p = append(p, name+" context not cancelled after the lease was lost")
					}
				}
				return ss.SendMsg(shop.New("ReserveReply"))
			},
		}
		addr := serveGRPC(t, gsrv,
			grpc.ChainUnaryInterceptor(unaryServer(l, interceptor.Method(shop.Reserve, interceptor.Field("product_id"), lock.FailFast()))),
			grpc.ChainStreamInterceptor(streamServer(l, interceptor.Method(shop.Restock, interceptor.Field("product_id"), lock.FailFast()))))
		selfAddr.Store(addr)
		cc := dial(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), 3*testBound)
		defer cancel()
		st, err := cc.NewStream(ctx, shop.RestockDesc, shop.Restock)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(shop.Set(shop.New("ReserveRequest"), "product_id", int64(42))); err != nil {
			t.Fatal(err)
		}
		_ = st.CloseSend()
		_ = st.RecvMsg(shop.New("ReserveReply"))
		select {
		case p := <-problems:
			for _, s := range p {
				t.Error(s)
			}
		case <-time.After(3 * testBound):
			t.Fatal("no report from the stream handler")
		}
		eventually(t, testBound, "lock gone after the stream", func() bool { return len(inspect(t, l, k).Holders) == 0 })
	})
}
