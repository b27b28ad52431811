//go:build long

package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/routelock/lock"
	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore/redisengine"
	"go.opentelemetry.io/otel/trace"
)

// otelTrace is the trace id of the OpenTelemetry span context in ctx, as
// lock.Trace documents it.
func otelTrace(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// withTrace returns ctx with a remote span context of trace id hex.
func withTrace(t *testing.T, ctx context.Context, hex string) context.Context {
	t.Helper()
	tid, err := trace.TraceIDFromHex(hex)
	if err != nil {
		t.Fatal(err)
	}
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
}

// between returns the part of s between the first from and the next to
// after it.
func between(t *testing.T, s, from, to string) string {
	t.Helper()
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		t.Fatalf("no %q in:\n%s", from, s)
	}
	part, _, ok := strings.Cut(rest, to)
	if !ok {
		t.Fatalf("no %q after %q in:\n%s", to, from, s)
	}
	return part
}

// TestWhoHolds: two instances, pod-a and pod-b, lock productID:42 through
// the HTTP route /products/{productID}/buy, each request with a trace of
// its own; pod-a holds, pod-b waits. The admin page (HTML and JSON) and the
// command (text and JSON) name the holder and the waiter by their instance
// names, with the route and each one's trace id.
func TestWhoHolds(t *testing.T) {
	const (
		route  = "/products/{productID}/buy"
		traceA = "4bf92f3577b34da6a3ce929d0e0e4736"
		traceB = "0af7651916cd43dd8448eb211c80319c"
	)
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		name, value := b.Env()
		env := map[string]string{name: value}
		cli := func(args ...string) result {
			t.Helper()
			return runWith(t, env, append([]string{"-prefix", prefix}, args...)...)
		}
		newLocker := func(name string) *lock.Locker {
			e, err := redisengine.New(b.Universal(t), redisengine.Options{Prefix: prefix, Name: name, TTL: 600 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return lock.FromEngine(e, lock.Trace(otelTrace))
		}
		podA, podB := newLocker("pod-a"), newLocker("pod-b")

		held, release := make(chan struct{}), make(chan struct{})
		ra := chi.NewRouter()
		ra.With(podA.ByParam("productID")).Post(route, func(w http.ResponseWriter, r *http.Request) {
			close(held)
			<-release
		})
		rb := chi.NewRouter()
		rb.With(podB.ByParam("productID", lock.Wait(20*time.Second))).Post(route, func(w http.ResponseWriter, r *http.Request) {})
		serve := func(h http.Handler, trace string) <-chan int {
			done := make(chan int, 1)
			req := httptest.NewRequest("POST", "/products/42/buy", nil)
			req = req.WithContext(withTrace(t, t.Context(), trace))
			go func() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				done <- w.Code
			}()
			return done
		}
		doneA := serve(ra, traceA)
		select {
		case <-held:
		case code := <-doneA:
			t.Fatalf("pod-a answered %d without holding", code)
		}
		doneB := serve(rb, traceB)
		defer func() {
			close(release)
			for _, c := range []<-chan int{doneA, doneB} {
				if code := <-c; code != http.StatusOK {
					t.Errorf("status %d", code)
				}
			}
		}()

		srv := httptest.NewServer(admin.Handler(podA.Operator(), admin.Config{}))
		defer srv.Close()
		get := func(path string, accept string) string {
			t.Helper()
			req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+path, nil)
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
			}
			return string(body)
		}

		// Each engine writes its record a moment after a hold or a wait
		// began: a bounded eventual check.
		var in operate.Lock
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(10 * time.Second); ; {
			in = operate.Lock{}
			body := get("/locks/productID:42", "")
			if err := json.Unmarshal([]byte(body), &in); err != nil {
				t.Fatal(err)
			}
			if len(in.Holders) == 1 && in.Holders[0].Trace != "" && len(in.Waiters) == 1 && in.Waiters[0].Trace != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the holder's and the waiter's origins never showed: %s", body)
			}
			<-tick.C
		}
		h, w := in.Holders[0], in.Waiters[0]
		if len(h.Names) != 1 || h.Names[0] != "pod-a" || h.Route != route || h.Trace != traceA {
			t.Errorf("admin JSON holder: %+v, want pod-a on %s with trace %s", h, route, traceA)
		}
		if w.Name != "pod-b" || w.Route != route || w.Trace != traceB {
			t.Errorf("admin JSON waiter: %+v, want pod-b on %s with trace %s", w, route, traceB)
		}
		var list operate.List
		if err := json.Unmarshal([]byte(get("/locks", "")), &list); err != nil || len(list.Locks) != 1 ||
			len(list.Locks[0].Holders) != 1 || list.Locks[0].Holders[0].Trace != traceA || len(list.Locks[0].Waiters) != 1 || list.Locks[0].Waiters[0].Name != "pod-b" {
			t.Errorf("admin JSON list: %+v, %v", list, err)
		}

		page := get("/", "text/html")
		holderCell := between(t, page, `<code title="owner digest">`, `<td class="num">`)
		waiterCell := between(t, page, ` waiting<ol>`, `</ol>`)
		for _, want := range []string{`on <code class="instance">pod-a</code>`, `via <code class="route">` + route + `</code>`, `trace <code class="trace">` + traceA + `</code>`} {
			if !strings.Contains(holderCell, want) {
				t.Errorf("the page's holder lacks %q:\n%s", want, holderCell)
			}
		}
		for _, want := range []string{`">pod-b</code>`, `via <code class="route">` + route + `</code>`, `trace <code class="trace">` + traceB + `</code>`} {
			if !strings.Contains(waiterCell, want) {
				t.Errorf("the page's waiter lacks %q:\n%s", want, waiterCell)
			}
		}
		if strings.Contains(holderCell, traceB) || strings.Contains(holderCell, "pod-b") || strings.Contains(waiterCell, traceA) || strings.Contains(waiterCell, "pod-a") {
			t.Errorf("holder and waiter mixed up:\n%s\n%s", holderCell, waiterCell)
		}

		r := cli("inspect", "productID:42")
		if r.code != 0 {
			t.Fatalf("inspect: %d %q", r.code, r.stderr)
		}
		text := r.stdout
		holderPart, waiterPart, _ := strings.Cut(text, "  #  INSTANCE")
		for _, want := range []string{"on pod-a (", "  route:     " + route + "\n", "  trace:     " + traceA + "\n"} {
			if !strings.Contains(holderPart, want) {
				t.Errorf("inspect's holder lacks %q:\n%s", want, text)
			}
		}
		row := between(t, waiterPart, "  1  ", "\n")
		for _, want := range []string{"pod-b (", route, traceB} {
			if !strings.Contains(row, want) {
				t.Errorf("inspect's waiter lacks %q:\n%s", want, text)
			}
		}
		if strings.Contains(holderPart, traceB) || strings.Contains(row, traceA) {
			t.Errorf("inspect mixed holder and waiter up:\n%s", text)
		}
		if r := cli("ls"); r.code != 0 || !strings.Contains(r.stdout, "pod-a (") || !strings.Contains(r.stdout, route) {
			t.Errorf("ls: %d %q\n%s", r.code, r.stderr, r.stdout)
		}
		r = cli("inspect", "-json", "productID:42")
		var js operate.Lock
		if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || r.code != 0 || len(js.Holders) != 1 || len(js.Waiters) != 1 {
			t.Fatalf("inspect -json: %d %v\n%s", r.code, err, r.stdout)
		}
		if h := js.Holders[0]; len(h.Names) != 1 || h.Names[0] != "pod-a" || h.Route != route || h.Trace != traceA {
			t.Errorf("inspect -json holder: %+v", h)
		}
		if w := js.Waiters[0]; w.Name != "pod-b" || w.Route != route || w.Trace != traceB {
			t.Errorf("inspect -json waiter: %+v", w)
		}
	})
}
