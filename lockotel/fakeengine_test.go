package lockotel_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// fakeEngine is the in-memory engine with what these tests do to it that a
// backend is not asked to do: it can be made unreachable, and says who
// waits for a key.
type fakeEngine struct {
	*locktest.Engine
	down atomic.Bool
}

// errDown is what Acquire returns while the engine is unreachable.
var errDown = fmt.Errorf("%w: the test took the engine away", lockcore.ErrUnavailable)

// Acquire fails with errDown while the engine is down, unless ctx
// re-enters a hold in memory, which needs no backend.
func (f *fakeEngine) Acquire(ctx context.Context, key lockcore.Key, p lockcore.Policy) (*lockcore.Lease, error) {
	if f.down.Load() {
		if ls := lockcore.Reenter(ctx, f.Engine, key); ls != nil {
			return ls, nil
		}
		return nil, errDown
	}
	return f.Engine.Acquire(ctx, key, p)
}

// SetUnavailable makes the engine unreachable (down) or reachable again.
func (f *fakeEngine) SetUnavailable(down bool) { f.down.Store(down) }

// Waiters returns how many acquisitions are queued for key.
func (f *fakeEngine) Waiters(key lockcore.Key) int {
	info, _ := f.Inspect(context.Background(), key)
	return len(info.Waiters)
}
