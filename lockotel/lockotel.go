package lockotel

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// scopeName is the instrumentation scope of lockotel's tracer and meter:
// the import path, as OpenTelemetry asks of an instrumentation library.
const scopeName = "github.com/routelock/lock/lockotel"

// Config configures New. Its zero value records to the global providers and
// leaves keys' values out.
type Config struct {
	// TracerProvider records the spans. Nil: the global provider,
	// otel.GetTracerProvider(), as it is when New is called.
	TracerProvider trace.TracerProvider

	// MeterProvider records the metrics. Nil: the global provider,
	// otel.GetMeterProvider(), as it is when New is called.
	MeterProvider metric.MeterProvider

	// KeyValues adds the whole key of each lock, its values included
	// (productID:42), to its spans as the attribute lock.key. Keys are the
	// requests' data, often user IDs or order numbers: turn it on only
	// where your traces may hold them. Metrics never get them.
	KeyValues bool
}

// telemetry turns what routelock's engines do into OpenTelemetry spans and
// metrics: it wraps engines (Wrap), which record each acquisition, and is
// the lockcore.Events of the engines it wraps, which records the rest.
type telemetry struct {
	tracer    trace.Tracer
	keyValues bool

	acquireDur metric.Float64Histogram
	holdDur    metric.Float64Histogram
	held       metric.Int64ObservableUpDownCounter
	waiting    metric.Int64ObservableUpDownCounter
	lost       metric.Int64Counter
	renewals   metric.Int64Counter
	wakeups    metric.Int64Counter
	results    metric.Int64Counter
	stored     metric.Int64Counter

	attrs attrCache
}

// telemetry is the Events of the engines it wraps.
var _ lockcore.Events = (*telemetry)(nil)

// Bucket boundaries, in seconds, of the duration histograms: from a lock
// taken on a quiet Redis (well under a millisecond) to a long wait or hold.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// New returns the telemetry that c configures, to attach to a Locker with
// lock.Observe (see the package documentation). One may serve several
// Lockers and engines; it is safe for concurrent use.
func New(c Config) lifecycle.Observer {
	tp, mp := c.TracerProvider, c.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	t := &telemetry{tracer: tp.Tracer(scopeName), keyValues: c.KeyValues}
	m := mp.Meter(scopeName)
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		if err != nil {
			otel.Handle(err)
		}
		if h == nil {
			h = noop.Float64Histogram{}
		}
		return h
	}
	upDown := func(name, desc, unit string) metric.Int64ObservableUpDownCounter {
		c, err := m.Int64ObservableUpDownCounter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		if err != nil {
			otel.Handle(err)
		}
		if c == nil {
			c = noop.Int64ObservableUpDownCounter{}
		}
		return c
	}
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		if err != nil {
			otel.Handle(err)
		}
		if c == nil {
			c = noop.Int64Counter{}
		}
		return c
	}
	t.acquireDur = hist("routelock.acquire.duration", "Time spent acquiring a lock, by outcome")
	t.holdDur = hist("routelock.hold.duration", "How long holds lasted, from grant to release or loss")
	t.held = upDown("routelock.held", "Holds live now", "{hold}")
	t.waiting = upDown("routelock.waiting", "Acquisitions waiting for another owner's hold now", "{acquisition}")
	t.lost = counter("routelock.lost", "Holds lost while their handler ran, by reason", "{hold}")
	t.renewals = counter("routelock.renewals", "Lease renewals, by outcome", "{renewal}")
	t.wakeups = counter("routelock.wakeups", "Times a waiting acquisition asked the backend again, by what woke it", "{wakeup}")
	t.results = counter("routelock.idempotency.requests", "Idempotent requests, by outcome", "{request}")
	t.stored = counter("routelock.idempotency.stored", "Bytes of idempotent requests' results stored", "By")
	// Holds and waits live now are counted with atomic adds per resource
	// and reported when a reader collects.
	if _, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.attrs.resources(func(v *measure) {
			o.ObserveInt64(t.held, v.held.Load(), v.obs...)
			o.ObserveInt64(t.waiting, v.waiting.Load(), v.obs...)
		})
		return nil
	}, t.held, t.waiting); err != nil {
		otel.Handle(err)
	}
	return t
}

// Events returns t, which records the releases, losses, waits, renewals
// and wake-ups the engines of the Lockers it observes tell of.
func (t *telemetry) Events() lockcore.Events { return t }
