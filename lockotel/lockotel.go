package lockotel

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/routelock/lock/internal/config"
	"github.com/routelock/lock/lockcore"
)

// ScopeName is the instrumentation scope of lockotel's tracer and meter.
const ScopeName = "github.com/routelock/lock/lockotel"

// Telemetry turns what routelock's engines do into OpenTelemetry spans and
// metrics: it wraps engines (Wrap), which record each acquisition, and is
// the lockcore.Events of the engines it wraps, which records the rest.
// Make one with New, per Locker or shared by several; it is safe for
// concurrent use.
type Telemetry struct {
	tracer    trace.Tracer
	keyValues bool

	acquireDur metric.Float64Histogram
	holdDur    metric.Float64Histogram
	held       metric.Int64ObservableUpDownCounter
	waiting    metric.Int64ObservableUpDownCounter
	lost       metric.Int64Counter
	renewals   metric.Int64Counter
	wakeups    metric.Int64Counter

	attrs attrCache
}

// Telemetry is the Events of the engines it wraps.
var _ lockcore.Events = (*Telemetry)(nil)

// An Option configures New.
type Option func(*options)

type options struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	keyValues bool
}

// WithTracerProvider makes the Telemetry record its spans with tp.
// Default: the global provider, otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tp = tp }
}

// WithMeterProvider makes the Telemetry record its metrics with mp.
// Default: the global provider, otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.mp = mp }
}

// WithKeyValues adds the whole key of each lock, its values included
// (productID:42), to its spans as the attribute lock.key. Keys are the
// requests' data, often user IDs or order numbers: opt in only where your
// traces may hold them. Metrics never get them.
func WithKeyValues() Option {
	return func(o *options) { o.keyValues = true }
}

// Bucket boundaries, in seconds, of the duration histograms: from a lock
// taken on a quiet Redis (well under a millisecond) to a long wait or hold.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// New returns a Telemetry configured by opts. A provider given as nil, or
// not given, is the global one as it is now (see the package
// documentation).
func New(opts ...Option) *Telemetry {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.tp == nil {
		o.tp = otel.GetTracerProvider()
	}
	if o.mp == nil {
		o.mp = otel.GetMeterProvider()
	}
	t := &Telemetry{tracer: o.tp.Tracer(ScopeName), keyValues: o.keyValues}
	m := o.mp.Meter(ScopeName)
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

// Option returns the lock.Option that reports a Locker's locks to t:
//
//	locker := lock.New(rdb, tel.Option())
//
// It wraps the Locker's engine (Wrap) and, for lock.New, makes t the Redis
// engine's Events (redisengine.Options.Events); give it after
// lock.RedisOptions, which replaces all of the engine's options. For
// lock.FromEngine it wraps the engine; give t to the engine's own events
// option too (see the package documentation).
func (t *Telemetry) Option() config.Option {
	return config.New("lockotel.Telemetry.Option", config.InNew, func(c *config.Config) {
		c.Wrap = t.Wrap
		c.Redis.Events = t
	})
}

// Wrap returns an engine that takes its locks from e and records each
// acquisition to t (see Engine). An engine that t wrapped already is
// returned as is.
//
// Panics if e is nil.
func (t *Telemetry) Wrap(e lockcore.Engine) lockcore.Engine {
	switch w := e.(type) {
	case nil:
		panic("lockotel: Wrap(nil)")
	case *Engine:
		if w.t == t {
			return w
		}
	}
	return &Engine{t: t, inner: e}
}
