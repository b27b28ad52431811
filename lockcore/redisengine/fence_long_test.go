//go:build long

package redisengine

import (
	"testing"
	"time"
)

// TestFencesAcrossLossesLong is TestFencesAcrossLosses over more than
// 100,000 tokens: rounds of every loss of the last token, each after
// thousands of exclusive holds, fail-fast refusals, reader admissions and
// 30,000 skipped waiters.
func TestFencesAcrossLossesLong(t *testing.T) {
	total := 0
	deadline := time.Now().Add(10 * time.Minute)
	for total < 100000 && time.Now().Before(deadline) {
		total += checkFencesAcrossLosses(t, 2, fenceLoad{churn: 6000, refusals: 3000, readers: 2000, skipped: 30000, ttl: 1500 * time.Millisecond})
		if t.Failed() {
			break
		}
	}
	t.Logf("%d tokens checked", total)
	if !t.Failed() && total < 100000 {
		t.Errorf("%d tokens checked in the time allowed, want at least 100,000", total)
	}
}
