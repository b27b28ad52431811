//go:build long

package redisengine

import (
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestRecordOutlivesLongHold: an engine that dies holding a lock with a
// long lease leaves its record (name, route) for as long as the lock can
// outlive it, not 90 s: the operator who looks for the stuck holder still
// finds its name.
func TestRecordOutlivesLongHold(t *testing.T) {
	t.Parallel()
	b := redistest.Mini(t)
	prefix := redistest.Prefix(t)
	l := newLocker(t, b, prefix, Options{Name: "pod-a", MaxTTL: 3 * time.Minute})
	ops := newLocker(t, b, prefix, Options{})
	key := mustKey(t, "productID", "42")
	if _, err := l.Acquire(t.Context(), key, lifecycle.Policy{TTL: 3 * time.Minute, Route: "/x"}); err != nil {
		t.Fatal(err)
	}
	named := func() (lockcore.Info, bool) {
		in, err := ops.Inspect(t.Context(), key)
		return in, err == nil && len(in.Holders) == 1 && len(in.Holders[0].Names) == 1 && in.Holders[0].Names[0] == "pod-a"
	}
	eventually(t, 10*time.Second, "the holder named", func() bool { _, ok := named(); return ok })
	// The process dies: its engine stops renewing and writing, the lock
	// stays held in Redis until its lease runs out.
	l.Close()
	b.Mini.FastForward(91 * time.Second)
	if in, ok := named(); !ok {
		t.Fatalf("91 s after its engine died, a lock with a 3 min lease shows %+v; want it held by pod-a", in)
	}
}
