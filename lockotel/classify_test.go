package lockotel

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/routelock/lock/lockcore"
)

// TestOutcomeOf: the outcome of each kind of error an engine returns,
// as the Redis engine and the in-memory one return them.
func TestOutcomeOf(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel2 := context.WithTimeout(live, 0)
	defer cancel2()
	<-expired.Done()
	busy := &lockcore.ContentionError{Key: "k"}
	timedOut := &lockcore.ContentionError{Key: "k", TimedOut: true}
	down := fmt.Errorf("%w: acquire: dial tcp: connection refused", lockcore.ErrUnavailable)
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want string
	}{
		{live, nil, "acquired"},
		{live, busy, "busy"},
		{live, timedOut, "wait_timeout"},
		{cancelled, errors.Join(busy, context.Canceled), "cancelled"},
		{expired, errors.Join(timedOut, context.DeadlineExceeded), "cancelled"},
		{expired, errors.Join(down, context.DeadlineExceeded), "unavailable"}, // Redis silent until the deadline: 503
		{live, errors.Join(busy, context.Canceled), "busy"},                   // not this request's context
		{live, down, "unavailable"},
		{live, lockcore.ErrClosed, "unavailable"},
		{live, fmt.Errorf("%w: WRONGPASS", lockcore.ErrMisconfigured), "error"},
		{live, fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey), "error"},
		{live, errors.New("something else"), "error"},
	} {
		if got := outcomeOf(tc.ctx, tc.err); got != tc.want {
			t.Errorf("outcomeOf(ctx %v, %v) = %s, want %s", tc.ctx.Err(), tc.err, got, tc.want)
		}
	}
}

// TestReasonOf: the reason of each kind of loss.
func TestReasonOf(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  string
	}{
		{fmt.Errorf("%w: by an operator", lockcore.ErrRevoked), "revoked"},
		{fmt.Errorf("%w: %w", lockcore.ErrLockLost, lockcore.ErrClosed), "closed"},
		{fmt.Errorf("%w: %w: renewals failed until the lease ran out", lockcore.ErrLockLost, lockcore.ErrUnavailable), "expired"},
		{fmt.Errorf("%w: the key is gone or held by another owner", lockcore.ErrLockLost), "gone"},
		{lockcore.ErrLockLost, "gone"},
	} {
		if got := reasonOf(tc.cause); got != tc.want {
			t.Errorf("reasonOf(%v) = %s, want %s", tc.cause, got, tc.want)
		}
	}
}

// TestAttrCacheBounded: past maxCached attribute sets the cache keeps no
// more, and still answers.
func TestAttrCacheBounded(t *testing.T) {
	defer func(n int) { maxCached = n }(maxCached)
	maxCached = 64
	var c attrCache
	for i := range maxCached + 10 {
		if m := c.get(kindResource, fmt.Sprint("r", i), "", ""); m == nil || len(m.add) != 1 || len(m.rec) != 1 {
			t.Fatalf("get %d: %+v", i, m)
		}
	}
	if n := len(*c.m.Load()); n != maxCached {
		t.Fatalf("%d sets cached, want %d", n, maxCached)
	}
	if a, b := c.get(kindResource, "r1", "", ""), c.get(kindResource, "r1", "", ""); a != b {
		t.Fatal("a cached set was made again")
	}
	if a, b := c.get(kindAcquire, "r1", "/a", "acquired"), c.get(kindAcquire, "r1", "/b", "acquired"); a == b {
		t.Fatal("two routes share a set")
	}
}

// TestEventsAllocateNothing: on providers that record nothing, the events
// of a steady state (attribute sets made) allocate nothing.
func TestEventsAllocateNothing(t *testing.T) {
	tel := New(WithTracerProvider(tracenoop.NewTracerProvider()), WithMeterProvider(noop.NewMeterProvider()))
	k, _ := lockcore.NewKey("productID", "42")
	lost := fmt.Errorf("%w: gone", lockcore.ErrLockLost)
	ctx := context.Background()
	run := func() {
		tel.Waiting(k, 1)
		tel.Woken(k, lockcore.WakeMessage)
		tel.Waiting(k, -1)
		tel.Renewed(k, nil)
		tel.Ended(ctx, k, 1, 0, lost, nil)
	}
	run()
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Fatalf("%v allocations per round of events", n)
	}
}

// TestLiveCountsPastTheCache: holds and waits of resources met after the
// attribute cache is full are still counted, under resource _other, and
// routelock.held and routelock.waiting return to 0 when they end.
func TestLiveCountsPastTheCache(t *testing.T) {
	defer func(n int) { maxCached = n }(maxCached)
	maxCached = 4
	reader := sdkmetric.NewManualReader()
	tel := New(WithTracerProvider(tracenoop.NewTracerProvider()), WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	ctx := context.Background()
	live := func() map[string][2]int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string][2]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				i := map[string]int{"routelock.held": 0, "routelock.waiting": 1}
				j, ok := i[m.Name]
				if !ok {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					r, _ := dp.Attributes.Value(attrResource)
					v := got[r.AsString()]
					v[j] += dp.Value
					got[r.AsString()] = v
				}
			}
		}
		return got
	}
	var keys []lockcore.Key
	for i := range 10 {
		k, _ := lockcore.NewKey(fmt.Sprint("r", i), "1")
		keys = append(keys, k)
		tel.Waiting(k, 1)
		tel.attrs.get(kindResource, k.Name(), "", "").held.Add(1) // as Acquire counts a fresh hold
	}
	got := live()
	var held, waiting int64
	for _, v := range got {
		held += v[0]
		waiting += v[1]
	}
	if held != 10 || waiting != 10 || got[otherResource][0] != 10-int64(maxCached) {
		t.Fatalf("live counts %v: held %d, waiting %d, want 10 and 10 with %d under %s", got, held, waiting, 10-maxCached, otherResource)
	}
	for _, k := range keys {
		tel.Waiting(k, -1)
		tel.Ended(ctx, k, 1, 0, lockcore.ErrReleased, nil)
	}
	for r, v := range live() {
		if v != [2]int64{} {
			t.Errorf("%s: held, waiting = %v after every hold and wait ended, want 0", r, v)
		}
	}
}
