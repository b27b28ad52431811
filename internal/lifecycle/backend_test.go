package lifecycle_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// undeclaredBatch is a Backend with the methods of a Batch that does not
// declare Promises.Batch: it takes and gives up holds one by one, and its
// batch methods are not to be called.
type undeclaredBatch struct {
	*locktest.Engine
	calls atomic.Int32
}

var errNoBatch = errors.New("no batches here")

func (b *undeclaredBatch) TakeAll(context.Context, []lockcore.Request) ([]lockcore.Hold, error) {
	b.calls.Add(1)
	return nil, errNoBatch
}

func (b *undeclaredBatch) ReleaseAll(_ context.Context, ts []lockcore.Hold) []error {
	b.calls.Add(1)
	errs := make([]error, len(ts))
	for i := range errs {
		errs[i] = errNoBatch
	}
	return errs
}

// TestServeBatchUndeclared: Serve sends several holds in one exchange only
// to a Batch that declares Promises.Batch; a backend that has the methods
// but does not declare it takes and releases each hold on its own, and
// ReleaseAll frees every key.
func TestServeBatchUndeclared(t *testing.T) {
	b := &undeclaredBatch{Engine: &locktest.Engine{}}
	e := lifecycle.Serve(b, nil)
	ctx := context.Background()
	var keys []lockcore.Key
	for _, name := range []string{"a", "b"} {
		k, err := lockcore.NewKey("batch", name)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	ls, err := lifecycle.AcquireAll(ctx, e, keys, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if err := lifecycle.ReleaseAll(ctx, ls); err != nil {
		t.Errorf("ReleaseAll: %v", err)
	}
	if n := b.calls.Load(); n != 0 {
		t.Errorf("the batch methods of a backend that does not declare Promises.Batch were called %d times", n)
	}
	for _, k := range keys {
		info, err := b.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Holders) != 0 {
			t.Errorf("%s is still held after ReleaseAll: %+v", k, info.Holders)
		}
	}
}
