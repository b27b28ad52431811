package lockotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/outcome"
	"github.com/routelock/lock/lockcore"
)

// Observe implements lock.Observer: it calls acquire with ctx itself,
// so that the lease's context (the handler's) keeps ctx's span as its
// current span, and records each key of the call in a span lock.acquire,
// a child of ctx's span, that ends when acquire returns, and in the metric
// routelock.acquire.duration, with routelock.held counting up for each
// fresh hold; keys taken in one exchange are each recorded with the
// exchange's wait, and a failure once, for the key it names (or the
// first). An acquisition without a trace id of its own
// (lock.Policy.Trace, set by lock.Trace) is labelled with the trace id
// of ctx's span, which the admin page and the routelock command show
// beside its holder or waiter.
func (t *telemetry) Observe(ctx context.Context, keys []lockcore.Key, p lifecycle.Policy, acquire func(context.Context, lifecycle.Policy) ([]*lifecycle.Lease, error)) ([]*lifecycle.Lease, error) {
	p = withTrace(ctx, p)
	start := time.Now()
	leases, err := acquire(ctx, p)
	wait := time.Since(start)
	if err != nil {
		key := keys[0]
		var ce *lockcore.ContentionError
		if errors.As(err, &ce) {
			for _, k := range keys {
				if k.String() == ce.Key {
					key = k
				}
			}
		}
		t.record(ctx, key, p, start, wait, nil, err)
	}
	for _, ls := range leases {
		t.record(ctx, ls.Key(), p, start, wait, ls, nil)
	}
	return leases, err
}

// record records an acquisition of key with p and context ctx, begun at
// start, that took wait and returned ls and err: its span and metrics.
func (t *telemetry) record(ctx context.Context, key lockcore.Key, p lifecycle.Policy, start time.Time, wait time.Duration, ls *lifecycle.Lease, err error) {
	_, span := t.tracer.Start(ctx, "lock.acquire", trace.WithTimestamp(start))
	res := key.Name()
	out := outcomeOf(ctx, err)
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 11)
		attrs = append(attrs, attribute.String(attrResource, res))
		if p.Route != "" {
			attrs = append(attrs, attribute.String(attrRoute, p.Route))
		}
		mode := modeWait
		if p.Wait < 0 {
			mode = modeFailFast
		}
		attrs = append(attrs, mode, attribute.String(attrOutcome, out), attribute.Float64(attrWait, wait.Seconds()))
		if p.Share != 0 {
			attrs = append(attrs, attribute.Int(attrShare, p.Share))
		}
		if ls != nil {
			attrs = append(attrs, attribute.Bool(attrReentered, ls.Reentered()), attribute.Int64(attrFence, ls.Fence()))
			if slot, ok := ls.Slot(); ok {
				attrs = append(attrs, attribute.Int(attrSlot, slot))
			}
		}
		if t.keyValues {
			attrs = append(attrs, attribute.String(attrKey, key.String()))
		}
		span.SetAttributes(attrs...)
		switch out {
		case outcomeAcquired:
			span.AddEvent("lock.granted")
		case outcomeUnavailable, outcomeError:
			span.SetStatus(codes.Error, out)
		}
	}
	span.End(trace.WithTimestamp(start.Add(wait)))

	t.acquireDur.Record(ctx, wait.Seconds(), t.attrs.get(kindAcquire, res, p.Route, out).rec...)
	if ls != nil && !ls.ReenteredInMemory() {
		t.attrs.get(kindResource, res, "", "").held.Add(1)
	}
}

// Outcomes of an acquisition (lock.outcome).
const (
	outcomeAcquired    = "acquired"
	outcomeBusy        = "busy"
	outcomeWaitTimeout = "wait_timeout"
	outcomeCancelled   = "cancelled"
	outcomeUnavailable = "unavailable"
	outcomeUpgrade     = "upgrade"     // an exclusive lock asked for by its shared holder
	outcomeGateClosed  = "gate_closed" // a resource whose gate is closed: sold out
	outcomeResult      = "result"      // an idempotent request's stored result, found instead (lockcore.ResultFound)
	outcomeError       = "error"
)

// outcomeOf classifies the error of an Acquire with context ctx. An engine
// that says it is unavailable is unavailable even when ctx's deadline
// passed while it did not answer (the Redis engine then matches both): the
// response says so too.
func outcomeOf(ctx context.Context, err error) string {
	if err == nil {
		return outcomeAcquired
	}
	if _, ok := errors.AsType[*lockcore.ResultFound](err); ok {
		return outcomeResult
	}
	k := outcome.Of(err)
	if ctx.Err() == nil {
		// A context error counts only when the acquisition's own context
		// ended: another context's does not make it cancelled.
		k &^= outcome.ContextEnded
	}
	return outcome.First(k, outcomes, outcomeError)
}

// outcomes is outcomeOf's table. Its order decides for an error of several
// kinds and is kept as it was: an unavailable or closed engine first, then
// the end of the acquisition's context, then a wait that ran out, then a
// busy lock.
var outcomes = []outcome.Row[string]{
	{Kinds: outcome.Unavailable | outcome.Closed, To: outcomeUnavailable},
	{Kinds: outcome.ContextEnded, To: outcomeCancelled},
	{Kinds: outcome.WaitTimeout, To: outcomeWaitTimeout},
	{Kinds: outcome.Busy, To: outcomeBusy},
	{Kinds: outcome.Upgrade, To: outcomeUpgrade},
	{Kinds: outcome.GateClosed, To: outcomeGateClosed},
}

// withTrace returns p labelled with the trace id of ctx's span, unless p
// has a trace id already or ctx has no span.
func withTrace(ctx context.Context, p lifecycle.Policy) lifecycle.Policy {
	if p.Trace == "" {
		if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
			p.Trace = sc.TraceID().String()
		}
	}
	return p
}
