package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/lockcore"
)

// streamReport is what the Restock handler of TestFakeStreamDerivesNoGoroutines
// saw, checked by the test.
type streamReport struct {
	before     int  // goroutines before deriving
	extra      int  // goroutines started while deriving 100 contexts
	tokenFirst bool // a fencing token before the first RecvMsg
	fence      int64
	held       []lifecycle.Held
	cause      error // of a derived context after Lose
	problems   []string
}

// TestFakeStreamDerivesNoGoroutines: for a stream whose key is in its first
// message, the handler's context, once its first RecvMsg took the lock,
// derives contexts as an ordinary context does: 50 WithCancel and 50
// WithTimeout start no goroutine (runtime.NumGoroutine, read inside the
// handler before and after). The derived contexts carry the lock
// (lifecycle.HeldFrom), and a lost lease cancels them with a cause
// matching lockcore.ErrLockLost.
func TestFakeStreamDerivesNoGoroutines(t *testing.T) {
	const derive = 100
	e := newFake()
	k := fakeKey(t, "product_id", "42")
	reports := make(chan streamReport, 1)
	rig := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{
		{Method: shop.Restock, Key: interceptor.Field("product_id"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}},
	}}, &shop.Server{Restock: func(ss grpc.ServerStream) error {
		var rep streamReport
		defer func() { reports <- rep }()
		_, rep.tokenFirst = enginetest.Fence(ss.Context())
		if err := ss.RecvMsg(shop.New("ReserveRequest")); err != nil {
			return err
		}
		ctx := ss.Context()

		derived := make([]context.Context, 0, derive)
		cancels := make([]context.CancelFunc, 0, derive)
		before := runtime.NumGoroutine()
		rep.before = before
		for i := range derive {
			var c context.Context
			var cancel context.CancelFunc
			if i%2 == 0 {
				c, cancel = context.WithCancel(ctx)
			} else {
				c, cancel = context.WithTimeout(ctx, time.Hour)
			}
			derived = append(derived, c)
			cancels = append(cancels, cancel)
		}
		rep.extra = runtime.NumGoroutine() - before
		defer func() {
			for _, cancel := range cancels {
				cancel()
			}
		}()

		some := derived[derive/2+1] // a WithTimeout one
		rep.fence, _ = enginetest.Fence(some)
		rep.held = lifecycle.HeldFrom(some)

		if !e.Lose(k) {
			rep.problems = append(rep.problems, "Lose found no hold")
		}
		for _, i := range []int{0, derive / 2, derive - 1} {
			select {
			case <-derived[i].Done():
			case <-time.After(fakeBound):
				rep.problems = append(rep.problems, fmt.Sprintf("derived context %d not cancelled by the lost lease", i))
				return ss.SendMsg(shop.New("ReserveReply"))
			}
		}
		rep.cause = context.Cause(derived[derive-1])
		if _, ok := enginetest.Fence(derived[0]); ok {
			rep.problems = append(rep.problems, "a derived context still has a fencing token after the loss")
		}
		return ss.SendMsg(shop.New("ReserveReply"))
	}})

	if _, err := restock(fakeCtx(t), rig.cc, 42); err != nil {
		t.Fatal(err)
	}
	var rep streamReport
	select {
	case rep = <-reports:
	case <-time.After(fakeBound):
		t.Fatal("no report from the handler")
	}
	for _, p := range rep.problems {
		t.Error(p)
	}
	t.Logf("goroutines: %d before deriving %d contexts, %+d after", rep.before, derive, rep.extra)
	if rep.extra > 0 {
		t.Errorf("deriving %d contexts from the stream's context started %d goroutines, want 0", derive, rep.extra)
	}
	if rep.tokenFirst {
		t.Error("the stream's context had a fencing token before its first message")
	}
	calls := e.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d acquisitions, want 1", len(calls))
	}
	if rep.fence != 1 || len(rep.held) != 1 || rep.held[0].Key != k || rep.held[0].Fence != 1 {
		t.Errorf("a derived context saw fence %d and holds %+v, want fence 1 on %v", rep.fence, rep.held, k)
	}
	if !errors.Is(rep.cause, lockcore.ErrLockLost) {
		t.Errorf("derived context's cause %v, want ErrLockLost", rep.cause)
	}
	if _, entries := e.Held(k); entries != 0 {
		t.Error("the lock outlived the stream")
	}
}

// TestFakeStreamRefused: a stream whose first message names a busy key
// ends with Aborted whatever its handler returns, and one that names none
// with InvalidArgument; the handler's first RecvMsg returns the refusal.
func TestFakeStreamRefused(t *testing.T) {
	e := newFake()
	k := fakeKey(t, "product_id", "42")
	recvErrs := make(chan error, 2)
	rig := newFakeRig(t, e, interceptor.Config{Rules: []interceptor.Rule{
		{Method: shop.Restock, Key: interceptor.Field("product_id"), Policy: lifecycle.Policy{Wait: lockcore.FailFast}},
	}}, &shop.Server{Restock: func(ss grpc.ServerStream) error {
		err := ss.RecvMsg(shop.New("ReserveRequest"))
		recvErrs <- err
		if err != nil {
			return errors.New("handler's own error")
		}
		return ss.SendMsg(shop.New("ReserveReply"))
	}})
	holder, err := e.Acquire(fakeCtx(t), k, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(context.Background())
	for _, tc := range []struct {
		id   int64
		code codes.Code
	}{{42, codes.Aborted}, {0, codes.InvalidArgument}} {
		_, err := restock(fakeCtx(t), rig.cc, tc.id)
		if codeOf(err) != tc.code {
			t.Errorf("product_id %d: %v, want %v", tc.id, err, tc.code)
		}
		if rerr := <-recvErrs; codeOf(rerr) != tc.code || strings.Contains(fmt.Sprint(err), "handler's own") {
			t.Errorf("product_id %d: first RecvMsg returned %v; stream ended with %v", tc.id, rerr, err)
		}
	}
}
