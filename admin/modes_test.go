package admin_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// holdModes holds productID:7 with two of its two permits and queues a
// permit of 1 behind them (each counts against its own n), and holds productID:8 with two readers, on e; it
// returns when the writer waits.
func holdModes(t *testing.T, e *locktest.Engine) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	k7, _ := lockcore.NewKey("productID", "7")
	k8, _ := lockcore.NewKey("productID", "8")
	for _, h := range []struct {
		k lockcore.Key
		p lifecycle.Policy
	}{{k7, lifecycle.Policy{Share: 2}}, {k7, lifecycle.Policy{Share: 2}}, {k8, lifecycle.Policy{Share: lifecycle.ShareAll}}, {k8, lifecycle.Policy{Share: lifecycle.ShareAll}}} {
		ls, err := lifecycle.Serve(e, nil).Acquire(ctx, h.k, h.p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ls.Release(context.Background()) })
	}
	go func() {
		if ls, err := lifecycle.Serve(e, nil).Acquire(ctx, k7, lifecycle.Policy{Wait: time.Minute, Share: 1}); err == nil {
			_ = ls.Release(context.Background())
		}
	}()
	wait, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	if err := e.Await(wait, func() bool {
		info, _ := e.Inspect(wait, k7)
		return len(info.Waiters) == 1
	}); err != nil {
		t.Fatal("the writer never queued:", err)
	}
}

// TestModes: the JSON and the page show each holder's mode, a permit's
// slot and n and its fence, and each waiter's mode.
func TestModes(t *testing.T) {
	e := &locktest.Engine{}
	holdModes(t, e)
	srv := mount(t, admin.Handler(e, admin.Config{}))

	r := do(t, srv, "GET", "/admin/locks/productID:7", "")
	var l operate.Lock
	if err := json.Unmarshal([]byte(r.body), &l); err != nil {
		t.Fatal(err, r.body)
	}
	if len(l.Holders) != 2 || len(l.Waiters) != 1 {
		t.Fatalf("productID:7: %s", r.body)
	}
	for i, h := range l.Holders {
		if h.Mode != "permit" || h.Permits != 2 || h.Slot == nil || *h.Slot != i || h.Fence == 0 {
			t.Errorf("holder %d: %+v, want a permit of 2 in slot %d with its fence", i, h, i)
		}
	}
	if w := l.Waiters[0]; w.Mode != "permit" || w.Permits != 1 {
		t.Errorf("waiter %+v, want a permit of 1", w)
	}
	r = do(t, srv, "GET", "/admin/locks/productID:8", "")
	l = operate.Lock{}
	if err := json.Unmarshal([]byte(r.body), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Holders) != 2 || l.Holders[0].Mode != "shared" || l.Holders[0].Slot != nil || strings.Contains(r.body, `"permits"`) {
		t.Fatalf("productID:8, two readers: %s", r.body)
	}

	page := do(t, srv, "GET", "/admin/", "", "Accept", "text/html").body
	for _, want := range []string{"permit 0 of 2, fence", "permit 1 of 2, fence", "shared, fence", `title="mode">permit</span>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}
