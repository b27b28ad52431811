package interceptor_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// fakeEngine is the in-memory engine with what these tests do to it that a
// backend is not asked to do: it records the Policy of every acquisition,
// can be made unreachable, and says who holds and who waits for a key.
type fakeEngine struct {
	*locktest.Engine
	mu    sync.Mutex
	calls []call
	down  bool
}

// call is one Acquire call, as it was made.
type call struct {
	Key    lockcore.Key
	Policy lockcore.Policy
}

// errDown is what Acquire returns while the engine is unreachable.
var errDown = fmt.Errorf("%w: the test took the engine away", lockcore.ErrUnavailable)

func newFake() *fakeEngine { return &fakeEngine{Engine: new(locktest.Engine)} }

// Acquire records the call; while the engine is down, it fails with errDown
// unless ctx re-enters a hold in memory, which needs no backend.
func (f *fakeEngine) Acquire(ctx context.Context, key lockcore.Key, p lockcore.Policy) (*lockcore.Lease, error) {
	f.mu.Lock()
	f.calls = append(f.calls, call{Key: key, Policy: p})
	down := f.down
	f.mu.Unlock()
	if down {
		if ls := lockcore.Reenter(ctx, f.Engine, key); ls != nil {
			return ls, nil
		}
		return nil, errDown
	}
	return f.Engine.Acquire(ctx, key, p)
}

// Calls returns every Acquire call made so far, in order.
func (f *fakeEngine) Calls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// SetUnavailable makes the engine unreachable (down) or reachable again.
func (f *fakeEngine) SetUnavailable(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// Held returns the fencing token of the hold of key and its number of
// entries (its fresh acquisition and token re-entries), or 0, 0 when free.
func (f *fakeEngine) Held(key lockcore.Key) (fence int64, entries int) {
	info, err := f.Inspect(context.Background(), key)
	if err != nil || !info.Held() {
		return 0, 0
	}
	return info.Fence, info.Holders[0].Count
}

// Waiters returns how many acquisitions are queued for key.
func (f *fakeEngine) Waiters(key lockcore.Key) int {
	info, _ := f.Inspect(context.Background(), key)
	return len(info.Waiters)
}

// Lose takes the hold of key away (a revocation, which ends it as lost)
// and reports whether there was one.
func (f *fakeEngine) Lose(key lockcore.Key) bool {
	_, err := f.Revoke(context.Background(), key, "taken away by the test")
	return err == nil
}
