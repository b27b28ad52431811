package lockotel_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockotel"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// bound bounds every wait of these tests, so that a broken engine or
// adapter fails a test instead of hanging it.
const bound = 10 * time.Second

func bounded(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

func mustKey(t testing.TB, parts ...string) lockcore.Key {
	t.Helper()
	k, err := lockcore.NewKey(parts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type sdkSpan = sdktrace.ReadOnlySpan

// rig is telemetry on SDK providers that the test reads back: every ended
// span in a recorder, metrics through a manual reader.
type rig struct {
	tel    lifecycle.Observer
	sr     *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	// served receives each request's span once it ended: the request and
	// everything the lock recorded for it are over.
	served chan trace.SpanContext
}

// newRig returns a rig on its own providers.
func newRig(t testing.TB) *rig { return newRigWith(t, lockotel.Config{}) }

// newRigWith is newRig with the settings of c other than its providers.
func newRigWith(t testing.TB, c lockotel.Config) *rig {
	r := &rig{sr: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), served: make(chan trace.SpanContext, 64)}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.sr))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		_ = r.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	c.TracerProvider, c.MeterProvider = r.tp, mp
	r.tel = lockotel.New(c)
	return r
}

// traced is HTTP middleware that serves each request in a span "request"
// of its own, as a program's tracing middleware would, and reports the
// span on r.served once it ended.
func (r *rig) traced(next http.Handler) http.Handler {
	tracer := r.tp.Tracer("test")
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx, span := tracer.Start(req.Context(), "request")
		defer func() {
			span.End()
			r.served <- span.SpanContext()
		}()
		next.ServeHTTP(w, req.WithContext(ctx))
	})
}

// wait returns the span of the next request served.
func (r *rig) wait(t testing.TB) trace.SpanContext {
	t.Helper()
	select {
	case sc := <-r.served:
		return sc
	case <-time.After(bound):
		t.Fatal("no request was served")
		return trace.SpanContext{}
	}
}

// spans returns the ended spans named name, in the order they ended.
func (r *rig) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// only returns the one ended span named name whose parent is parent.
func (r *rig) only(t testing.TB, name string, parent trace.SpanContext) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range r.spans(name) {
		if s.Parent().SpanID() == parent.SpanID() {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans %s under %v, want 1; spans: %s", len(found), name, parent.SpanID(), dump(r.sr.Ended()))
	}
	return found[0]
}

func dump(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "\n  %s %v parent %v %v", s.Name(), s.SpanContext().SpanID(), s.Parent().SpanID(), s.Attributes())
		for _, e := range s.Events() {
			fmt.Fprintf(&b, "\n    event %s %v", e.Name, e.Attributes)
		}
	}
	return b.String()
}

// attrs returns kvs as a map.
func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs checks that kvs hold exactly the attributes of want, with
// these values (a nil value: any value), and no others.
func wantAttrs(t testing.TB, what string, kvs []attribute.KeyValue, want map[string]any) {
	t.Helper()
	got := attrs(kvs)
	for k, v := range want {
		gv, ok := got[attribute.Key(k)]
		if !ok {
			t.Fatalf("%s: no attribute %s in %v", what, k, kvs)
		}
		if v != nil && gv.AsInterface() != v {
			t.Fatalf("%s: %s = %v (%T), want %v (%T)", what, k, gv.AsInterface(), gv.AsInterface(), v, v)
		}
	}
	for k := range got {
		if _, ok := want[string(k)]; !ok {
			t.Fatalf("%s: unexpected attribute %s = %v", what, k, got[k].AsInterface())
		}
	}
}

// events returns the names of s's events.
func events(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, e := range s.Events() {
		names = append(names, e.Name)
	}
	return names
}

// metrics is one collection, by instrument name.
type metrics map[string]metricdata.Metrics

func (r *rig) collect(t testing.TB) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	m := metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/routelock/lock/lockotel" {
			t.Fatalf("instrumentation scope %q", sm.Scope.Name)
		}
		for _, x := range sm.Metrics {
			m[x.Name] = x
		}
	}
	return m
}

func set(kvs ...string) attribute.Set {
	var as []attribute.KeyValue
	for i := 0; i+1 < len(kvs); i += 2 {
		as = append(as, attribute.String(kvs[i], kvs[i+1]))
	}
	return attribute.NewSet(as...)
}

// sum returns the value of the data point of sum name with exactly the
// attributes kvs (pairs of key and value), and whether there is one.
func (m metrics) sum(t testing.TB, name string, kvs ...string) (int64, bool) {
	t.Helper()
	x, ok := m[name]
	if !ok {
		return 0, false
	}
	s, ok := x.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want a Sum[int64]", name, x.Data)
	}
	want := set(kvs...)
	for _, dp := range s.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value, true
		}
	}
	return 0, false
}

// wantSum checks the value of a sum's data point; 0 also passes when there
// is no such data point.
func (m metrics) wantSum(t testing.TB, name string, want int64, kvs ...string) {
	t.Helper()
	got, ok := m.sum(t, name, kvs...)
	if got != want || !ok && want != 0 {
		t.Fatalf("%s%v = %d (recorded: %v), want %d; all: %s", name, kvs, got, ok, want, m.points(name))
	}
}

// hist returns the count and sum of the data point of histogram name with
// exactly the attributes kvs.
func (m metrics) hist(t testing.TB, name string, kvs ...string) (count uint64, sum float64) {
	t.Helper()
	x, ok := m[name]
	if !ok {
		return 0, 0
	}
	h, ok := x.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, want a Histogram[float64]", name, x.Data)
	}
	if x.Unit != "s" {
		t.Fatalf("%s has unit %q, want s", name, x.Unit)
	}
	want := set(kvs...)
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Count, dp.Sum
		}
	}
	return 0, 0
}

func (m metrics) wantCount(t testing.TB, name string, want uint64, kvs ...string) {
	t.Helper()
	if got, _ := m.hist(t, name, kvs...); got != want {
		t.Fatalf("%s%v count = %d, want %d; all: %s", name, kvs, got, want, m.points(name))
	}
}

// points describes every data point of name.
func (m metrics) points(name string) string {
	var out []string
	switch d := m[name].Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, fmt.Sprintf("%v=%d", dp.Attributes.ToSlice(), dp.Value))
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, fmt.Sprintf("%v count %d", dp.Attributes.ToSlice(), dp.Count))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// serve serves h on a loopback httptest server, closed when the test ends.
func serve(t testing.TB, h http.Handler) *httptest.Server {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// post sends POST url with ctx and returns the status and body; a request
// that fails returns status 0 and the error's text.
func post(c *http.Client, ctx context.Context, url string, hdr ...string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, nil)
	if err != nil {
		return 0, err.Error()
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// client returns an HTTP client on a transport of its own, closed when the
// test ends; wrap, if set, wraps the transport (middleware.Transport).
func client(t testing.TB, wrap func(http.RoundTripper) http.RoundTripper) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	var rt http.RoundTripper = tr
	if wrap != nil {
		rt = wrap(tr)
	}
	return &http.Client{Transport: rt, Timeout: bound}
}
