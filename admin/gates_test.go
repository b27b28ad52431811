package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestGates: the JSON and the page show the closed gates, a sold-out
// product's until opened and a timed one's with its time; POST
// .../gates/{key}/open opens one, as JSON and from the page's form; GET
// there is refused; a cross-site POST is refused and opens nothing.
func TestGates(t *testing.T) {
	e := &locktest.Engine{}
	ctx := context.Background()
	k42, k7 := mustKey(t, "productID:42"), mustKey(t, "productID:7")
	if err := e.CloseGate(ctx, k42, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.CloseGate(ctx, k7, time.Hour); err != nil {
		t.Fatal(err)
	}
	srv := mount(t, admin.Handler(e, admin.Config{}))

	r := do(t, srv, "GET", "/admin/gates", "")
	var gs operate.Gates
	if err := json.Unmarshal([]byte(r.body), &gs); err != nil || r.code != 200 {
		t.Fatal(r.code, err, r.body)
	}
	if len(gs.Gates) != 2 || gs.Gates[0].Key != "productID:42" || !gs.Gates[0].Until.IsZero() ||
		gs.Gates[1].Key != "productID:7" || gs.Gates[1].Until.Sub(gs.Gates[1].Since) != time.Hour {
		t.Fatalf("gates: %+v", gs)
	}
	if strings.Contains(r.body, `"until":"0001`) {
		t.Fatalf("a gate closed until opened carries a zero until: %s", r.body)
	}

	page := do(t, srv, "GET", "/admin/", "", "Accept", "text/html")
	for _, want := range []string{"Sold out", "<code>productID:42</code>", "when opened", `action="./gates/productID:42/open"`, " left</span>", `href="./gates"`} {
		if !strings.Contains(page.body, want) {
			t.Fatalf("the page lacks %q:\n%s", want, page.body)
		}
	}

	if r := do(t, srv, "GET", "/admin/gates/productID:42/open", ""); r.code != 405 {
		t.Fatalf("GET of an open: %d %s", r.code, r.body)
	}
	if r := do(t, srv, "POST", "/admin/gates/productID:42/open", "", "Content-Type", jsonCT, "Sec-Fetch-Site", "cross-site"); r.code != 403 {
		t.Fatalf("a cross-site open: %d %s", r.code, r.body)
	}
	if _, closed := isClosed(e.GateOf(context.Background(), k42)); !closed {
		t.Fatal("a refused cross-site open opened the gate")
	}
	r = do(t, srv, "POST", "/admin/gates/productID:42/open", "", "Content-Type", jsonCT)
	var op operate.Opened
	if err := json.Unmarshal([]byte(r.body), &op); err != nil || r.code != 200 || op.Opened != "productID:42" {
		t.Fatalf("open: %d %s", r.code, r.body)
	}
	if _, closed := isClosed(e.GateOf(context.Background(), k42)); closed {
		t.Fatal("the gate is still closed after the open")
	}
	r = do(t, srv, "POST", "/admin/gates/productID:7/open", "", formPost()...)
	if r.code != 200 || !strings.Contains(r.body, "Opened the gate of <code>productID:7</code>") || strings.Contains(r.body, "Sold out") {
		t.Fatalf("open from the page's form: %d %s", r.code, r.body)
	}
	if gs, _ := e.Gates(ctx); len(gs) != 0 {
		t.Fatalf("gates left: %+v", gs)
	}
}

// TestSegmentGates: a segment's gate (lifecycle.SegmentKey) is listed by
// its key and opened by the link the page gives it, its space and '#'
// escaped in the path.
func TestSegmentGates(t *testing.T) {
	e := &locktest.Engine{}
	ctx := context.Background()
	seg := lifecycle.SegmentKey(mustKey(t, "productID:42"), 3)
	if err := e.CloseGate(ctx, seg, 0); err != nil {
		t.Fatal(err)
	}
	srv := mount(t, admin.Handler(e, admin.Config{}))
	var gs operate.Gates
	if r := do(t, srv, "GET", "/admin/gates", ""); json.Unmarshal([]byte(r.body), &gs) != nil || len(gs.Gates) != 1 || gs.Gates[0].Key != "productID:42 #3" {
		t.Fatalf("gates: %d %s", r.code, r.body)
	}
	page := do(t, srv, "GET", "/admin/", "", "Accept", "text/html")
	const action = `action="./gates/productID:42%20%233/open"`
	if !strings.Contains(page.body, action) {
		t.Fatalf("the page lacks %q:\n%s", action, page.body)
	}
	r := do(t, srv, "POST", "/admin/gates/productID:42%20%233/open", "", "Content-Type", jsonCT)
	var op operate.Opened
	if err := json.Unmarshal([]byte(r.body), &op); err != nil || r.code != 200 || op.Opened != "productID:42 #3" {
		t.Fatalf("open: %d %s", r.code, r.body)
	}
	if _, closed := isClosed(e.GateOf(context.Background(), seg)); closed {
		t.Fatal("the segment's gate is still closed after the open")
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
