package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestAcquireOrResultEmpty: an empty stored result is a result: the
// acquisition that finds it gets a non-nil, empty one and no lease, never
// neither.
func TestAcquireOrResultEmpty(t *testing.T) {
	ctx := context.Background()
	l := lifecycle.Serve(&locktest.Engine{}, nil)
	k, err := lockcore.NewKey("empty")
	if err != nil {
		t.Fatal(err)
	}
	ls, res, err := lifecycle.AcquireOrResult(ctx, l, k, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil || ls == nil || res != nil {
		t.Fatalf("the first acquisition: %v, %q, %v; want the lease", ls, res, err)
	}
	if err := lifecycle.Keep(ctx, ls, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	ls, res, err = lifecycle.AcquireOrResult(ctx, l, k, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil || ls != nil || res == nil || len(res) != 0 {
		t.Fatalf("after an empty result was kept: %v, %q (nil %v), %v; want the empty result", ls, res, res == nil, err)
	}
}
