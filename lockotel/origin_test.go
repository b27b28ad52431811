package lockotel_test

import (
	"context"
	"testing"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestObserveLabelsTrace: a Locker observed by lockotel labels each hold
// and each waiter with the trace id of the acquiring request's span, so
// that the admin page and the routelock command show it without
// lock.Trace; a trace id the caller gave (lifecycle.Policy.Trace) is kept.
func TestObserveLabelsTrace(t *testing.T) {
	mem := &locktest.Engine{Name: "pod-a"}
	r := newRig(t)
	e := lock.FromEngine(mem, lock.Observe(r.tel))
	tracer := r.tp.Tracer("test")
	ctx, span := tracer.Start(bounded(t), "request")
	defer span.End()
	key := mustKey(t, "productID", "42")

	held, err := e.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, Route: "/products/{productID}/buy"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()

	wctx, wspan := tracer.Start(bounded(t), "request")
	defer wspan.End()
	waited := make(chan error, 1)
	go func() {
		ls, err := e.Acquire(wctx, key, lifecycle.Policy{Wait: bound, Route: "/products/{productID}/buy"})
		if err == nil {
			err = ls.Release(context.Background())
		}
		waited <- err
	}()
	if err := mem.Await(bounded(t), func() bool {
		info, _ := mem.Inspect(context.Background(), key)
		return len(info.Waiters) == 1
	}); err != nil {
		t.Fatal(err)
	}
	info, err := mem.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 1 || info.Holders[0].Trace != span.SpanContext().TraceID().String() {
		t.Errorf("holders %+v; want one with trace %s", info.Holders, span.SpanContext().TraceID())
	}
	if w := info.Waiters[0]; w.Trace != wspan.SpanContext().TraceID().String() {
		t.Errorf("waiter %+v; want trace %s", w, wspan.SpanContext().TraceID())
	}
	_ = held.Release(context.Background())
	if err := <-waited; err != nil {
		t.Fatal(err)
	}

	// A trace id of the caller's own is kept.
	ls, err := e.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast, Trace: "req-7"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ls.Release(context.Background()) }()
	if info, _ := mem.Inspect(context.Background(), key); len(info.Holders) != 1 || info.Holders[0].Trace != "req-7" {
		t.Errorf("holders %+v; want trace req-7", info.Holders)
	}
}
