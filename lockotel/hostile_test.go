package lockotel_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/lockotel"
	"github.com/routelock/lock/middleware"
)

// recorded is every string the telemetry recorded, with where: span names,
// attributes, events and their attributes, status descriptions, links, and
// the attributes of every metric data point.
func (r *rig) recorded(t *testing.T) map[string]string {
	out := map[string]string{}
	addAttrs := func(where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			out[where+" "+string(kv.Key)] = string(kv.Key) + "=" + kv.Value.String()
		}
	}
	for i, s := range r.sr.Ended() {
		where := fmt.Sprintf("span %d %s", i, s.Name())
		out[where] = s.Name()
		out[where+" status"] = s.Status().Description
		addAttrs(where, s.Attributes())
		for j, e := range s.Events() {
			out[fmt.Sprintf("%s event %d", where, j)] = e.Name
			addAttrs(fmt.Sprintf("%s event %d %s", where, j, e.Name), e.Attributes)
		}
		for j, l := range s.Links() {
			addAttrs(fmt.Sprintf("%s link %d", where, j), l.Attributes)
		}
	}
	for name, m := range r.collect(t) {
		var sets []attribute.Set
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		default:
			t.Fatalf("metric %s of type %T", name, m.Data)
		}
		for i, s := range sets {
			addAttrs(fmt.Sprintf("metric %s %d", name, i), s.ToSlice())
		}
	}
	return out
}

// TestHostileNothingLeaks: requests on the key value secret-42 bring a
// made-up owner token, and propagate their real ones to a nested call that
// re-enters; a fail-fast request finds the lock held (its error names the
// key). No token and no key value appears in any span name, attribute,
// event, status or metric attribute; with Config.KeyValues the key's value
// appears, and only as the span attribute lock.key.
func TestHostileNothingLeaks(t *testing.T) {
	const secret = "secret-42"
	const madeUp = "0123456789abcdef0123456789abcdef"
	for _, withKeys := range []bool{false, true} {
		t.Run(fmt.Sprintf("KeyValues=%v", withKeys), func(t *testing.T) {
			r := newRigWith(t, lockotel.Config{KeyValues: withKeys})
			fe := &locktest.Engine{Events: r.tel.Events()}
			locker := lock.FromEngine(fe, lock.Observe(r.tel))
			var mu sync.Mutex
			tokens := []string{madeUp}
			saw := func(req *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				tokens = append(tokens, lifecycle.TokensFrom(req.Context())...)
			}
			nested := client(t, middleware.Transport)
			hold, proceed := make(chan struct{}), make(chan struct{})
			var url string
			router := chi.NewRouter()
			router.Use(r.traced)
			router.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, req *http.Request) {
				saw(req)
				if req.Header.Get("X-Hold") != "" {
					hold <- struct{}{}
					<-proceed
					return
				}
				// A nested call with this request's context carries its
				// tokens, and re-enters.
				code, body := post(nested, req.Context(), url+"/products/"+chi.URLParam(req, "productID")+"/refund")
				w.WriteHeader(code)
				fmt.Fprint(w, body)
			})
			router.With(locker.ByParam("productID")).Post("/products/{productID}/refund", func(w http.ResponseWriter, req *http.Request) {
				saw(req)
				fmt.Fprint(w, "refunded")
			})
			router.With(locker.ByParam("productID", lock.FailFast())).Post("/products/{productID}/reserve", func(w http.ResponseWriter, req *http.Request) {})
			url = serve(t, router).URL
			c := client(t, nil)

			if code, body := post(c, bounded(t), url+"/products/"+secret+"/buy", "Routelock-Token", madeUp); code != http.StatusOK || body != "refunded" {
				t.Fatalf("buy: %d %s", code, body)
			}
			done := make(chan int, 1)
			go func() {
				code, _ := post(c, bounded(t), url+"/products/"+secret+"/buy", "X-Hold", "1")
				done <- code
			}()
			<-hold
			if code, _ := post(c, bounded(t), url+"/products/"+secret+"/reserve", "Routelock-Token", madeUp); code != http.StatusConflict {
				t.Fatalf("reserve while held: %d, want 409", code)
			}
			close(proceed)
			wantStatus(t, done, http.StatusOK)
			for range 4 { // buy, its refund, the holding buy, reserve
				r.wait(t)
			}

			mu.Lock()
			if len(tokens) < 3 {
				t.Fatalf("the handlers saw tokens %d times", len(tokens)-1)
			}
			secrets := append([]string{secret}, tokens...)
			mu.Unlock()
			keys := 0
			for where, v := range r.recorded(t) {
				for _, s := range secrets {
					if !strings.Contains(v, s) {
						continue
					}
					if s == secret && withKeys && strings.HasPrefix(where, "span ") && v == "lock.key=productID:"+secret {
						keys++
						continue
					}
					t.Errorf("%s: %q holds %q", where, v, s)
				}
			}
			if withKeys && keys == 0 {
				t.Error("KeyValues recorded no lock.key")
			}
		})
	}
}
