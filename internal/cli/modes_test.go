package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestModes: inspect, ls and -json show the holders of a shared lock with
// their mode, slot and fence, and each waiter's mode, from a real engine
// (a permit of 1 waits behind two holders of 2 permits: each counts
// against its own n).
func TestModes(t *testing.T) {
	e := &locktest.Engine{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	k, _ := lockcore.NewKey("productID", "7")
	for range 2 {
		ls, err := lifecycle.Serve(e, nil).Acquire(ctx, k, lifecycle.Policy{Share: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ls.Release(context.Background()) })
	}
	go func() {
		if ls, err := lifecycle.Serve(e, nil).Acquire(ctx, k, lifecycle.Policy{Wait: time.Minute, Share: 1}); err == nil {
			_ = ls.Release(context.Background())
		}
	}()
	wait, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	if err := e.Await(wait, func() bool { info, _ := e.Inspect(wait, k); return len(info.Waiters) == 1 }); err != nil {
		t.Fatal(err)
	}
	withOp(t, e)

	r := runWith(t, nil, "inspect", "productID:7")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`holder: +\w+, 1 acquisition, permit 0 of 2, fence \d+, on locktest`),
		regexp.MustCompile(`holder: +\w+, 1 acquisition, permit 1 of 2, fence \d+, on locktest`),
		regexp.MustCompile(`1 +locktest +permit +`),
	} {
		if !want.MatchString(r.stdout) {
			t.Errorf("inspect lacks %v:\n%s", want, r.stdout)
		}
	}
	if r = runWith(t, nil, "ls"); !strings.Contains(r.stdout, " +1 permit ") {
		t.Errorf("ls does not say the lock has another permit holder:\n%s", r.stdout)
	}
	r = runWith(t, nil, "-json", "inspect", "productID:7")
	var l operate.Lock
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		t.Fatal(err, r.stdout)
	}
	if len(l.Holders) != 2 || l.Holders[1].Mode != "permit" || l.Holders[1].Slot == nil || *l.Holders[1].Slot != 1 || l.Waiters[0].Mode != "permit" || l.Waiters[0].Permits != 1 {
		t.Fatalf("-json inspect: %s", r.stdout)
	}
}
