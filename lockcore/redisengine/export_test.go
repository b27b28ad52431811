package redisengine

import (
	"context"
	"sync"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// lockers are the Lockers the engines' tests acquire through: one per
// engine, so that a context that holds a key through an engine re-enters
// it in memory, as through a lock.Locker.
var lockers sync.Map // *Engine → lifecycle.Locker

func (l *Engine) locker() lifecycle.Locker {
	if v, ok := lockers.Load(l); ok {
		return v.(lifecycle.Locker)
	}
	v, _ := lockers.LoadOrStore(l, lifecycle.Serve(l, l.opt.Events))
	return v.(lifecycle.Locker)
}

// Acquire takes the lock on key as a Locker on the engine does.
func (l *Engine) Acquire(ctx context.Context, key lockcore.Key, p lifecycle.Policy) (*lifecycle.Lease, error) {
	return l.locker().Acquire(ctx, key, p)
}
