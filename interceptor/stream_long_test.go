//go:build long

package interceptor_test

// The stream path of the server interceptor on the Redis engine: a stream
// whose key is in its first message locks inside the handler's first
// RecvMsg, with a context that has a hold slot (lifecycle.WithHoldSlot).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const streamBound = 5 * time.Second

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(streamBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", streamBound, what)
		}
		time.Sleep(2 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

// TestStreamCallerGoesAwayWhileWaiting: a stream whose first message
// names a held key waits for it inside the handler's first RecvMsg. When
// the client cancels the stream meanwhile, the wait ends (the handler's
// RecvMsg returns an error, the handler never holds the lock, its context
// carries no fencing token) and nothing is left in Redis: no queued
// waiter, and once the holder releases, the key is free rather than handed
// to the departed stream. A second holder can then take it at once.
func TestStreamCallerGoesAwayWhileWaiting(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Universal(t)
		t.Cleanup(func() { _ = rdb.Close() })
		e, err := redisengine.New(rdb, redisengine.Options{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		k, _ := lockcore.NewKey("product_id", "42")
		ctx := context.Background()
		holder, err := lifecycle.Serve(e, nil).Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}

		type report struct {
			recvErr error
			fenced  bool
			cause   error
		}
		reports := make(chan report, 1)
		srv := grpc.NewServer(grpc.ChainStreamInterceptor(interceptor.StreamServer(lifecycle.Serve(e, nil), interceptor.Config{Rules: []interceptor.Rule{
			{Method: shop.Restock, Key: interceptor.Field("product_id"), Policy: lifecycle.Policy{Wait: 30 * time.Second}},
		}})))
		shop.Register(srv, &shop.Server{Restock: func(ss grpc.ServerStream) error {
			var r report
			r.recvErr = ss.RecvMsg(shop.New("ReserveRequest"))
			_, r.fenced = enginetest.Fence(ss.Context())
			select {
			case <-ss.Context().Done():
				r.cause = context.Cause(ss.Context())
			case <-time.After(streamBound):
			}
			reports <- r
			return r.recvErr
		}})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() { defer close(served); _ = srv.Serve(lis) }()
		defer func() { srv.Stop(); <-served }()
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()

		sctx, cancel := context.WithCancel(ctx)
		st, err := cc.NewStream(sctx, shop.RestockDesc, shop.Restock)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(shop.Set(shop.New("ReserveRequest"), "product_id", int64(42))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the stream queued for the lock", func() bool {
			info, err := e.Inspect(ctx, k)
			return err == nil && len(info.Waiters) == 1
		})
		cancel()
		var r report
		select {
		case r = <-reports:
		case <-time.After(2 * streamBound):
			t.Fatal("the handler's first RecvMsg did not return after the client went away")
		}
		if r.recvErr == nil {
			t.Error("the handler's first RecvMsg returned nil: it runs as if it held the lock")
		}
		if r.fenced {
			t.Error("the handler's context has a fencing token although it never got the lock")
		}
		if r.cause == nil || errors.Is(r.cause, lockcore.ErrLockLost) {
			t.Errorf("handler's context cause %v, want the client's cancellation", r.cause)
		}
		waitFor(t, "the departed stream left the wait queue", func() bool {
			info, err := e.Inspect(ctx, k)
			return err == nil && len(info.Waiters) == 0
		})
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next, err := lifecycle.Serve(e, nil).Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast}) // fail fast
		if err != nil {
			info, _ := e.Inspect(ctx, k)
			t.Fatalf("after the holder released, a fail-fast acquire: %v (lock state %s)", err, fmt.Sprintf("held=%v waiters=%d ttl=%v", (len(info.Holders) > 0), len(info.Waiters), info.TTL))
		}
		_ = next.Release(ctx)
	})
}
