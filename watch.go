package lock

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/lockcore"
)

// watcher logs, for a Locker given Logger, what its engine does not log
// itself because the Locker did not make it (FromEngine): a lease lost
// while its holder ran, and the engine becoming unavailable and answering
// again, once per transition. New's and NewRedis's engine logs these
// itself, with more detail (its instance name, the route, the trace id),
// and gets no watcher.
type watcher struct {
	log  *slog.Logger
	down atomic.Int64 // when the engine was first found unavailable (Unix ns), 0 while it answers
}

// newWatcher returns the watcher of a Locker that logs through lg, or nil
// when it needs none: no logger, or an engine the Locker made (it logs
// itself).
func newWatcher(lg *slog.Logger, owned bool) *watcher {
	if lg == nil || owned {
		return nil
	}
	return &watcher{log: lg}
}

// acquired notes the outcome of one acquisition of key: err, or ls, which
// it logs if it is lost while held.
func (w *watcher) acquired(key lockcore.Key, ls *Lease, err error) {
	switch {
	case err == nil:
		if since := w.down.Load(); since != 0 && w.down.CompareAndSwap(since, 0) {
			w.log.Info("routelock: the lock engine answers again", "down", time.Since(time.Unix(0, since)).Round(time.Millisecond))
		}
		if ls.ReenteredInMemory() {
			return // the outer lease of this process reports its hold's loss
		}
		ctx := ls.Context()
		context.AfterFunc(ctx, func() {
			// A hold ended at its MaxHold is not lost: the route asked for
			// that end, and the engine that logs its own losses does not
			// log it either.
			// The lease's own hold, not one it was taken under (another
			// of a request's several resources).
			if cause := ls.Err(); errors.Is(cause, lockcore.ErrLockLost) && !errors.Is(cause, lockcore.ErrMaxHold) {
				w.log.Warn("routelock: a lease was lost while its holder ran", "resource", key.Name(), "cause", cause)
			}
		})
	case errors.Is(err, lockcore.ErrUnavailable):
		if w.down.CompareAndSwap(0, time.Now().UnixNano()) {
			w.log.Warn("routelock: the lock engine is unavailable: locked requests are refused (503) until it answers", "err", err)
		}
	}
}
