// Package enginetest is what the adapters' tests do to an in-memory engine
// that a backend is not asked to do: record every acquisition's Policy,
// take the engine away, and say who holds and who waits for a key. It
// wraps locktest.Engine; only tests import it.
package enginetest

import (
	"context"
	"fmt"
	"sync"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// Fake is a locktest.Engine that records every Acquire call and can be
// made unreachable. It is a Locker too (its Core owns the leases of its
// holds): make it with New.
type Fake struct {
	*locktest.Engine
	*lifecycle.Core
	mu    sync.Mutex
	calls []Call
	down  bool
}

// Call is one Acquire call, as it was made.
type Call struct {
	Key    lockcore.Key
	Policy lifecycle.Policy
}

// ErrDown is what Acquire returns while the engine is unreachable.
var ErrDown = fmt.Errorf("%w: the test took the engine away", lockcore.ErrUnavailable)

// New returns a Fake on a fresh in-memory engine.
func New() *Fake {
	f := &Fake{Engine: new(locktest.Engine)}
	f.Core = lifecycle.Serve(f, nil)
	return f
}

// Acquire records the call; while the engine is down, it fails with
// ErrDown unless ctx re-enters a hold in memory, which needs no backend.
func (f *Fake) Acquire(ctx context.Context, key lockcore.Key, p lifecycle.Policy) (*lifecycle.Lease, error) {
	f.mu.Lock()
	f.calls = append(f.calls, Call{Key: key, Policy: lifecycle.Recheck(p)}) // its fields, as a test writes them
	f.mu.Unlock()
	return f.Core.Acquire(ctx, key, p)
}

// Take implements lockcore.Engine: the in-memory engine's, or ErrDown
// while the engine is down.
func (f *Fake) Take(ctx context.Context, r lockcore.Request) (lockcore.Hold, error) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return nil, ErrDown
	}
	return f.Engine.Take(ctx, r)
}

// Calls returns every Acquire call made so far, in order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// SetUnavailable makes the engine unreachable (down) or reachable again.
func (f *Fake) SetUnavailable(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// Held returns the fencing token of the hold of key and its number of
// entries (its fresh acquisition and token re-entries), or 0, 0 when free.
func (f *Fake) Held(key lockcore.Key) (fence int64, entries int) {
	info, err := f.Inspect(context.Background(), key)
	if err != nil || len(info.Holders) == 0 {
		return 0, 0
	}
	return info.Fence, info.Holders[0].Count
}

// Waiters returns how many acquisitions are queued for key.
func (f *Fake) Waiters(key lockcore.Key) int {
	info, _ := f.Inspect(context.Background(), key)
	return len(info.Waiters)
}

// Lose takes the hold of key away (a revocation, which ends it as lost)
// and reports whether there was one.
func (f *Fake) Lose(key lockcore.Key) bool {
	_, err := f.Revoke(context.Background(), key, "taken away by the test")
	return err == nil
}

// Fence returns the fencing token of the innermost lock ctx holds, the
// first of lifecycle.HeldFrom, as lock.FencingToken does.
func Fence(ctx context.Context) (int64, bool) {
	if held := lifecycle.HeldFrom(ctx); len(held) > 0 {
		return held[0].Fence, true
	}
	return 0, false
}

// WithToken returns ctx carrying tok, an owner token from
// lifecycle.NewToken or a lease, as a call propagated from another process
// brings it (lifecycle.Intake). It panics if Intake refuses tok, which a
// token of NewToken never is.
func WithToken(ctx context.Context, tok string) context.Context {
	ctx, err := lifecycle.Intake(ctx, "token", []string{tok}, nil)
	if err != nil {
		panic(err)
	}
	return ctx
}
