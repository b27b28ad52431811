package lockotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// Waiting implements lockcore.Events: routelock.waiting.
func (t *telemetry) Waiting(key lockcore.Key, delta int) {
	t.attrs.get(kindResource, key.Name(), "", "").waiting.Add(int64(delta))
}

// Woken implements lockcore.Events: routelock.wakeups.
func (t *telemetry) Woken(key lockcore.Key, by string) {
	t.wakeups.Add(context.Background(), 1, t.attrs.get(kindWake, key.Name(), "", by).add...)
}

// Outcomes of a renewal.
const (
	renewalOK          = "ok"
	renewalLost        = "lost"
	renewalRevoked     = "revoked"
	renewalUnavailable = "unavailable"
	renewalError       = "error"
)

// Renewed implements lockcore.Events: routelock.renewals.
func (t *telemetry) Renewed(key lockcore.Key, err error) {
	out := renewalError
	switch {
	case err == nil:
		out = renewalOK
	case errors.Is(err, lockcore.ErrRevoked):
		out = renewalRevoked
	case errors.Is(err, lockcore.ErrLockLost):
		out = renewalLost
	case errors.Is(err, lockcore.ErrUnavailable):
		out = renewalUnavailable
	}
	t.renewals.Add(context.Background(), 1, t.attrs.get(kindRenewal, key.Name(), "", out).add...)
}

// Reasons of a loss (lock.reason).
const (
	reasonRevoked = "revoked"
	reasonExpired = "expired"
	reasonClosed  = "closed"
	reasonMaxHold = "max_hold"
	reasonGone    = "gone"
)

// reasonOf classifies the cause of a loss.
func reasonOf(cause error) string {
	switch {
	case errors.Is(cause, lockcore.ErrRevoked):
		return reasonRevoked
	case errors.Is(cause, lockcore.ErrClosed):
		return reasonClosed
	case errors.Is(cause, lockcore.ErrMaxHold):
		return reasonMaxHold
	case errors.Is(cause, lockcore.ErrUnavailable):
		return reasonExpired
	}
	return reasonGone
}

// Ended implements lockcore.Events. A release records the span
// lock.release; a loss an event lock.lost or lock.revoked on ctx's span
// and routelock.lost. Both record routelock.hold.duration and count
// routelock.held down.
func (t *telemetry) Ended(ctx context.Context, key lockcore.Key, held, release time.Duration, cause, err error) {
	res := key.Name()
	m := t.attrs.get(kindResource, res, "", "")
	t.holdDur.Record(ctx, held.Seconds(), m.rec...)
	m.held.Add(-1)

	if errors.Is(cause, lockcore.ErrReleased) {
		// From the start of the release, which has just returned, to now.
		_, span := t.tracer.Start(ctx, "lock.release", trace.WithTimestamp(time.Now().Add(-release)))
		if span.IsRecording() {
			out := "released"
			if err != nil {
				out = outcomeUnavailable
				span.SetStatus(codes.Error, out)
			}
			attrs := make([]attribute.KeyValue, 0, 4)
			attrs = append(attrs, attribute.String(attrResource, res), attribute.String(attrOutcome, out),
				attribute.Float64(attrHeld, held.Seconds()))
			if t.keyValues {
				attrs = append(attrs, attribute.String(attrKey, key.String()))
			}
			span.SetAttributes(attrs...)
		}
		span.End()
		return
	}

	reason := reasonOf(cause)
	t.lost.Add(ctx, 1, t.attrs.get(kindLost, res, "", reason).add...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		name := "lock.lost"
		if reason == reasonRevoked {
			name = "lock.revoked"
		}
		attrs := make([]attribute.KeyValue, 0, 3)
		attrs = append(attrs, attribute.String(attrResource, res), attribute.String(attrReason, reason))
		if t.keyValues {
			attrs = append(attrs, attribute.String(attrKey, key.String()))
		}
		span.AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// telemetry hears what idempotent requests come to.
var _ lifecycle.ResultObserver = (*telemetry)(nil)

// Result counts an idempotent request of route by its outcome, and the
// bytes stored for it.
func (t *telemetry) Result(ctx context.Context, route, outcome string, stored int) {
	attrs := metric.WithAttributes(attribute.String("lock.route", route), attribute.String("lock.outcome", outcome))
	t.results.Add(ctx, 1, attrs)
	if stored > 0 {
		t.stored.Add(ctx, int64(stored), metric.WithAttributes(attribute.String("lock.route", route)))
	}
}
