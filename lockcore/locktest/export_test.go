package locktest

import (
	"context"
	"fmt"
	"sync"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// ErrLost is the cause with which Lose takes a hold away.
var ErrLost = fmt.Errorf("%w: locktest: taken away by Engine.Lose", lockcore.ErrLockLost)

// Lose ends the live hold of key as lost with cause ErrLost, as a backend
// that expired or handed it over would, without moving the fencing counter
// or keeping an audit record, and reports whether key had a live hold.
func (e *Engine) Lose(key lockcore.Key) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ks := e.keys[key]
	if ks == nil || len(ks.owners) == 0 {
		return false
	}
	e.lose(ks, ErrLost)
	ks.owners = nil
	e.admit(ks)
	return true
}

// Held returns the fencing token of the live hold of key and its number of
// entries (its fresh acquisition plus its token re-entries), or 0, 0.
func (e *Engine) Held(key lockcore.Key) (fence int64, entries int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ks := e.keys[key]; ks != nil && len(ks.owners) > 0 {
		return ks.owners[0].fence, len(ks.owners[0].entries)
	}
	return 0, 0
}

// Waiters returns how many acquisitions are queued for key.
func (e *Engine) Waiters(key lockcore.Key) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ks := e.keys[key]; ks != nil {
		return len(ks.queue)
	}
	return 0
}

// Defects names the deliberate faults a broken Engine can have.
var Defects = []string{
	"grantTwice", "lifo", "ignoreTokens", "tokenTakesFree", "silentLoss",
	"fenceReset", "keepWaiter", "revokeNoBump", "waitIgnored",
	"slotReused", "writerJoins", "readersPass", "gateIgnored",
	"keepTrim", "keepAgain", "keepLost", "keepApart", "dropKept", "keepGrants",
}

// Broken returns an Engine with the named defect, reporting to ev.
func Broken(defect string, ev lockcore.Events) *Engine {
	e := &Engine{Events: ev}
	d := &e.defects
	switch defect {
	case "grantTwice":
		d.grantTwice = true
	case "lifo":
		d.lifo = true
	case "ignoreTokens":
		d.ignoreTokens = true
	case "tokenTakesFree":
		d.tokenTakesFree = true
	case "silentLoss":
		d.silentLoss = true
	case "fenceReset":
		d.fenceReset = true
	case "keepWaiter":
		d.keepWaiter = true
	case "revokeNoBump":
		d.revokeNoBump = true
	case "waitIgnored":
		d.waitIgnored = true
	case "slotReused":
		d.slotReused = true
	case "writerJoins":
		d.writerJoins = true
	case "readersPass":
		d.readersPass = true
	case "gateIgnored":
		d.gateIgnored = true
	case "keepTrim":
		d.keepTrim = true
	case "keepAgain":
		d.keepAgain = true
	case "keepLost":
		d.keepLost = true
	case "keepApart":
		d.keepApart = true
	case "dropKept":
		d.dropKept = true
	case "keepGrants":
		d.keepGrants = true
	default:
		panic("locktest: no defect " + defect)
	}
	return e
}

// lockers are the Lockers the engine's tests acquire through: one per
// engine, told its Events, so that a context that holds a key through an
// engine re-enters it in memory, as through a lock.Locker.
var lockers sync.Map // *Engine → lifecycle.Locker

func (e *Engine) locker() lifecycle.Locker {
	if v, ok := lockers.Load(e); ok {
		return v.(lifecycle.Locker)
	}
	v, _ := lockers.LoadOrStore(e, lifecycle.Serve(e, e.Events))
	return v.(lifecycle.Locker)
}

// Acquire takes the lock on key as a Locker on the engine does.
func (e *Engine) Acquire(ctx context.Context, key lockcore.Key, p lifecycle.Policy) (*lifecycle.Lease, error) {
	return e.locker().Acquire(ctx, key, p)
}

// Locker returns the Locker the engine's tests acquire through, for a
// test that wraps it.
func (e *Engine) Locker() lifecycle.Locker { return e.locker() }
