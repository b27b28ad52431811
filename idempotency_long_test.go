//go:build long

package lock_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/routelock/lock/internal/redistest"
)

// TestIdempotencyRunsOnceOnCluster is TestIdempotencyRunsOnceAcrossInstances
// (100 keys × 10 duplicates at once, over 3 app instances) on a Redis
// Cluster of 3 masters, beside one server for comparison, and measures
// what waiting in line costs a duplicate: for each duplicate, its latency
// less that of its key's first run (the one answered fresh); and the p99
// of the duplicates' latencies against the first runs'. The duplicates of
// a key in one instance follow the first of them in memory; that one
// waits in line for the key, and is told the stored response (small
// enough to come with the message) as soon as the first run keeps it, as
// are those of the other instances, together: the log shows how long
// after the first run's answer each is answered, by place in line.
//
// Asserted, as robust on a loaded machine: the run-once checks of
// idemBurst, and that no duplicate is answered before its key's first run
// wrote to the store (it is answered from the response stored after
// that). The latencies are logged, not asserted.
func TestIdempotencyRunsOnceOnCluster(t *testing.T) {
	for _, b := range redistest.Deployments(t) {
		if b.Name != "cluster" && b.Name != "redis" {
			continue // miniredis and Sentinel: one server as far as this goes
		}
		t.Run(b.Name, func(t *testing.T) {
			answers, store := idemBurst(t, b)
			var first, dups, excess, after []time.Duration
			var byRank [idemDups - 1][]time.Duration // after the first run's answer, by place in line
			for k, as := range answers {
				i := slices.IndexFunc(as[:], func(a timedAnswer) bool { return a.status == http.StatusCreated && !a.replayed })
				if i < 0 {
					continue // idemBurst failed the test
				}
				f, wrote := as[i], store.last[fmt.Sprintf("key-%d", k)]
				first = append(first, f.done.Sub(f.sent))
				var line []time.Duration
				for d, a := range as {
					if d != i && a.replayed {
						line = append(line, a.done.Sub(f.done))
					}
				}
				slices.Sort(line)
				for r, d := range line {
					byRank[r] = append(byRank[r], d)
				}
				for d, a := range as {
					if d == i || !a.replayed {
						continue // idemBurst failed the test
					}
					dups = append(dups, a.done.Sub(a.sent))
					excess = append(excess, a.done.Sub(a.sent)-f.done.Sub(f.sent))
					after = append(after, a.done.Sub(f.done))
					if a.done.Before(wrote) {
						t.Errorf("key-%d: a duplicate answered %v before the first run wrote", k, wrote.Sub(a.done))
					}
				}
			}
			if len(first) == 0 {
				return
			}
			p := func(ds []time.Duration, q float64) time.Duration {
				s := slices.Clone(ds)
				slices.Sort(s)
				return s[min(len(s)-1, int(q*float64(len(s))))].Round(10 * time.Microsecond)
			}
			t.Logf("%s: first runs (%d) p50 %v p99 %v max %v; duplicates (%d) p50 %v p99 %v max %v",
				b.Name, len(first), p(first, .5), p(first, .99), p(first, 1), len(dups), p(dups, .5), p(dups, .99), p(dups, 1))
			t.Logf("%s: a duplicate's latency less its first run's: p50 %v p90 %v p99 %v max %v; answered after the first run's answer: p50 %v p99 %v max %v",
				b.Name, p(excess, .5), p(excess, .9), p(excess, .99), p(excess, 1), p(after, .5), p(after, .99), p(after, 1))
			t.Logf("%s: median wait after the first run's answer of the 1st, 5th and 9th duplicate answered: %v, %v, %v",
				b.Name, p(byRank[0], .5), p(byRank[4], .5), p(byRank[idemDups-2], .5))
			t.Logf("%s: p99 of duplicates %v vs p99 of first runs + 5ms %v: within %v",
				b.Name, p(dups, .99), p(first, .99)+5*time.Millisecond, p(dups, .99) <= p(first, .99)+5*time.Millisecond)
		})
	}
}
