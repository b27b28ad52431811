package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestGates: gates lists the closed gates, as a table and as JSON; open
// opens one, after which gates no longer lists it; both check their
// operands before connecting.
func TestGates(t *testing.T) {
	e := &locktest.Engine{}
	ctx := context.Background()
	k42, _ := lockcore.NewKey("productID", "42")
	k7, _ := lockcore.NewKey("productID", "7")
	if err := e.CloseGate(ctx, k42, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.CloseGate(ctx, k7, time.Hour); err != nil {
		t.Fatal(err)
	}
	opened := withOp(t, e)

	r := runWith(t, nil, "gates")
	if r.code != exitOK || !strings.Contains(r.stdout, "KEY") ||
		!strings.Contains(r.stdout, "productID:42") || !strings.Contains(r.stdout, "when opened") || !strings.Contains(r.stdout, "productID:7") {
		t.Fatalf("gates: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runWith(t, nil, "-json", "gates")
	var gs operate.Gates
	if err := json.Unmarshal([]byte(r.stdout), &gs); err != nil || len(gs.Gates) != 2 || gs.Gates[0].Key != "productID:42" {
		t.Fatalf("gates -json: %v\n%s", err, r.stdout)
	}
	r = runWith(t, nil, "open", "productID:42")
	if r.code != exitOK || !strings.Contains(r.stdout, "opened the gate of productID:42") {
		t.Fatalf("open: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, closed := isClosed(e.GateOf(context.Background(), k42)); closed {
		t.Fatal("the gate is closed after open")
	}
	r = runWith(t, nil, "-json", "open", "productID:7")
	var op operate.Opened
	if err := json.Unmarshal([]byte(r.stdout), &op); err != nil || op.Opened != "productID:7" {
		t.Fatalf("open -json: %v\n%s", err, r.stdout)
	}
	if r = runWith(t, nil, "gates"); !strings.Contains(r.stdout, "no gate is closed") {
		t.Fatalf("gates after opening both:\n%s", r.stdout)
	}

	before := *opened
	for _, args := range [][]string{{"gates", "productID:42"}, {"open"}, {"open", "a", "b"}, {"open", "bad key"}} {
		if r := runWith(t, nil, args...); r.code != exitUsage {
			t.Errorf("%q: exit %d, want %d (usage)\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
	if *opened != before {
		t.Fatal("a usage error connected to Redis")
	}
}

// isClosed reads what Gatekeeper.GateOf returned: the gate, and whether it
// is closed. Panics on any other error: the test's engine answers gates.
func isClosed(g lockcore.Gate, err error) (lockcore.Gate, bool) {
	closed := errors.Is(err, lockcore.ErrGateClosed)
	if err != nil && !closed {
		panic(err)
	}
	return g, closed
}
