package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore/redisengine"
)

// BenchmarkIdempotent is what an idempotency key costs a request, one
// request at a time through a chi router on a loopback HTTP server, the
// handler answering at once: with no middleware ("none"); with
// lock.ByParam on a product of its own per request ("lock": an
// uncontended lock); with Locker.Idempotent and a key of its own per
// request ("first": the lock, the run, and the response stored with the
// release); and with one key for every request ("replay": the stored
// response, found without the lock). It reports the Redis calls each
// request sent ("calls/op", as the client counts them: a pipeline's
// commands one by one).
func BenchmarkIdempotent(b *testing.B) {
	for _, c := range []struct {
		name  string
		route func(l *lock.Locker) func(http.Handler) http.Handler
		key   func(i int64) string // the Idempotency-Key of request i, "" for none
	}{
		{"none", nil, nil},
		{"lock", func(l *lock.Locker) func(http.Handler) http.Handler { return l.ByParam("productID") }, nil},
		{"first", func(l *lock.Locker) func(http.Handler) http.Handler { return l.Idempotent() }, func(i int64) string { return fmt.Sprint("k-", i) }},
		{"replay", func(l *lock.Locker) func(http.Handler) http.Handler { return l.Idempotent() }, func(int64) string { return "k" }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var cmds atomic.Int64
			r := chi.NewRouter()
			h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"id":"pay_1","amount":500,"status":"paid"}`)
			})
			if c.route == nil {
				r.Post("/products/{productID}/buy", h)
			} else {
				l := benchLocker(b, &cmds)
				r.With(c.route(l)).Post("/products/{productID}/buy", h)
			}
			srv := httptest.NewServer(r)
			b.Cleanup(srv.Close)
			cl := &http.Client{Timeout: 30 * time.Second}
			b.Cleanup(cl.CloseIdleConnections)
			b.ReportAllocs()
			var n int64
			from := cmds.Load()
			b.ResetTimer()
			for b.Loop() {
				n++
				product := n // a product of its own: the lock uncontended
				if c.key != nil {
					product = 42 // the same path, which the payload's fingerprint covers
				}
				req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/products/%d/buy", srv.URL, product), strings.NewReader("amount=500"))
				if c.key != nil {
					req.Header.Set("Idempotency-Key", c.key(n))
				}
				resp, err := cl.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			b.ReportMetric(float64(cmds.Load()-from)/float64(n), "calls/op")
		})
	}
}

// benchLocker is a Locker at the defaults on the benchmark's server, whose
// client counts its commands in cmds, closed when b ends.
func benchLocker(b *testing.B, cmds *atomic.Int64) *lock.Locker {
	b.Helper()
	rdb, err := ServerAt(addr).Client(0, false, cmds)
	if err != nil {
		b.Fatal(err)
	}
	e, err := redisengine.New(rdb, redisengine.Options{Prefix: fmt.Sprintf("bench:idem:%d:", time.Now().UnixNano())})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = e.Close()
		_ = rdb.Close()
	})
	return lock.FromEngine(e)
}
