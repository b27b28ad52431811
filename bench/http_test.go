package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore/redisengine"
)

// section is the time each handler of BenchmarkHTTP works.
const section = time.Millisecond

// mutexByParam is the in-process baseline of BenchmarkHTTP: one
// sync.Mutex per value of the route parameter, as a service that runs one
// instance would lock.
func mutexByParam(name string) func(http.Handler) http.Handler {
	var mu sync.Mutex
	locks := map[string]*sync.Mutex{}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v := chi.URLParam(r, name)
			mu.Lock()
			m := locks[v]
			if m == nil {
				m = new(sync.Mutex)
				locks[v] = m
			}
			mu.Unlock()
			m.Lock()
			defer m.Unlock()
			next.ServeHTTP(w, r)
		})
	}
}

// BenchmarkHTTP is 64 concurrent requests at a time on one product, each
// handler 1 ms long, through a chi router on a loopback HTTP server: the
// time per request against the ideal of 1 ms (the handlers one after
// another), with the lock as lock.ByParam at the defaults (hand-over in
// memory), with redisengine.Options.LocalHandOvers -1 (every hand-over
// through Redis), and an in-process mutex per product. It reports "x-ideal", 1 ms over the time per request, and the
// medians of the gap from one handler's end to the next one's start (the
// hand-over) and of the handler's own time.
//
// The handler spends its 1 ms in one of two ways. "sleep" asks
// time.Sleep: Go's runtime wakes a sleeper through epoll, whose timeout
// is whole milliseconds, so network traffic during the sleep (the lock's
// own calls to Redis, or the HTTP server's) makes the sleep itself longer,
// by up to a millisecond, whatever the lock costs. "cpu" works on the CPU
// until 1 ms has passed, as a handler that computes does, and so measures
// the lock, the router and the server, not the runtime's timer.
func BenchmarkHTTP(b *testing.B) {
	locks := []struct {
		name string
		mw   func(b *testing.B) func(http.Handler) http.Handler
	}{
		{"mutex", func(*testing.B) func(http.Handler) http.Handler { return mutexByParam("productID") }},
		{"routelock", func(b *testing.B) func(http.Handler) http.Handler {
			return httpLocker(b, redisengine.Options{}).ByParam("productID")
		}},
		{"routelock-queue", func(b *testing.B) func(http.Handler) http.Handler {
			return httpLocker(b, redisengine.Options{LocalHandOvers: -1}).ByParam("productID")
		}},
	}
	works := []struct {
		name string
		do   func()
	}{
		{"sleep", func() { time.Sleep(section) }},
		{"cpu", func() {
			for start := time.Now(); time.Since(start) < section; {
			}
		}},
	}
	for _, work := range works {
		b.Run(work.name, func(b *testing.B) {
			for _, lk := range locks {
				b.Run(lk.name, func(b *testing.B) { benchHTTP(b, lk.mw(b), work.do) })
			}
		})
	}
}

// benchHTTP is one run of BenchmarkHTTP: handlers that do work, behind mw.
func benchHTTP(b *testing.B, mw func(http.Handler) http.Handler, work func()) {
	r := chi.NewRouter()
	var inside sync.Mutex // held by every handler: a second one at once fails the run
	var spans handlerSpans
	r.With(mw).Post("/products/{productID}/buy", func(w http.ResponseWriter, _ *http.Request) {
		if !inside.TryLock() {
			http.Error(w, "two handlers at once", http.StatusConflict)
			return
		}
		start := time.Now()
		work()
		spans.add(start, time.Now())
		inside.Unlock()
	})
	srv := httptest.NewServer(r)
	b.Cleanup(srv.Close)
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	b.Cleanup(cl.CloseIdleConnections)
	url := srv.URL + "/products/42/buy"
	b.SetParallelism(32) // 64 goroutines at GOMAXPROCS=2
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := cl.Post(url, "text/plain", nil)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	per := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(section)/float64(per), "x-ideal")
	gap, sec := spans.medians()
	b.ReportMetric(float64(gap.Microseconds()), "gap-µs")
	b.ReportMetric(float64(sec.Microseconds()), "handler-µs")
}

// httpLocker is a Locker on the benchmark's server with engine options o,
// closed when b ends.
func httpLocker(b *testing.B, o redisengine.Options) *lock.Locker {
	b.Helper()
	var cmds atomic.Int64
	rdb, err := ServerAt(addr).Client(0, false, &cmds)
	if err != nil {
		b.Fatal(err)
	}
	o.Prefix = fmt.Sprintf("bench:http:%d:", time.Now().UnixNano())
	e, err := redisengine.New(rdb, o)
	if err != nil {
		b.Fatal(err)
	}
	l := lock.FromEngine(e)
	b.Cleanup(func() {
		_ = e.Close()
		_ = rdb.Close()
	})
	return l
}

// handlerSpans records when each handler started and ended, one at a time.
type handlerSpans struct{ starts, ends []time.Time }

func (s *handlerSpans) add(start, end time.Time) {
	s.starts = append(s.starts, start)
	s.ends = append(s.ends, end)
}

// medians returns the median time from one handler's end to the next one's
// start (the lock's hand-over), and the median handler time.
func (s *handlerSpans) medians() (gap, handler time.Duration) {
	if len(s.starts) < 2 {
		return 0, 0
	}
	gaps := make([]time.Duration, 0, len(s.starts)-1)
	secs := make([]time.Duration, 0, len(s.starts))
	for i := range s.starts {
		secs = append(secs, s.ends[i].Sub(s.starts[i]))
		if i > 0 {
			gaps = append(gaps, s.starts[i].Sub(s.ends[i-1]))
		}
	}
	slices.Sort(gaps)
	slices.Sort(secs)
	return gaps[len(gaps)/2], secs[len(secs)/2]
}
