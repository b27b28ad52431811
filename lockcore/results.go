package lockcore

import (
	"context"
	"time"
)

// Results is an Engine that keeps results beside its locks, for requests
// that must run once however often they are sent (idempotency keys): the
// first holder of a key stores its result with its release, in one step,
// and whoever holds or asks for the key after it finds the result there.
// It declares so with Promises.Results.
//
// The result of key lives in the engine's backend, beside the lock of key
// (on a Redis Cluster, in its slot), as long as it was stored for, or
// until dropped, whatever happens to the processes that stored it or read
// it.
type Results interface {
	Engine
	// Result returns the result stored for key, and false when there is
	// none (never stored, expired, or dropped). It fails with an error
	// matching ErrUnavailable when the backend does not answer within the
	// engine's timeout, and with ErrClosed once the engine is closed.
	Result(ctx context.Context, key Key) ([]byte, bool, error)
	// Take, with Request.Result, takes nothing when a result is stored for
	// the key, then or while it waits in line, and fails with a
	// *ResultFound.
	//
	// Keep releases h, a hold of key that this engine took and its holder
	// released, as Hold.Release(ctx, nil) does, and stores res for key for
	// keep, as one step: res is stored only if h still holds key in the
	// backend (its lease did not run out; nobody took the key since), and
	// then nobody can take key between the store and the release. When h
	// no longer holds key it stores nothing, and its error matches
	// ErrLockLost. An error matching ErrUnavailable means the backend did
	// not answer in time: res may or may not be stored, and the step goes
	// on in the background, res with it, as a failed Release's does: res
	// is stored if it lands while h still holds key (a plain release
	// would free key without it, for a duplicate to run again). A call
	// that a client re-sent after a lost reply stores res once and
	// reports success.
	Keep(ctx context.Context, key Key, h Hold, res []byte, keep time.Duration) error
	// DropResult deletes the result of key, and reports whether there was
	// one. The next holder of key runs as if key had never been used.
	DropResult(ctx context.Context, key Key) (bool, error)
	// StoredResults returns the stored results whose keys start with
	// prefix (an escaped key's beginning, as Key.String writes it; "" for
	// all), sorted by key, at most limit of them (limit > 0), and whether
	// there were more.
	StoredResults(ctx context.Context, prefix string, limit int) ([]StoredResult, bool, error)
}

// ResultFound is the error of a Take with Request.Result when a result is
// stored for its key: nothing is held, and Result is what Results.Keep
// stored. A waiter in line for the key learns of a result kept by the
// holder ahead of it as it would of its turn: it need not take the lock to
// read it.
type ResultFound struct {
	Result []byte
}

func (e *ResultFound) Error() string { return "routelock: a result is stored for the key" }

// StoredResult is a stored result as an operator sees it
// (Results.StoredResults): its key, not its content.
type StoredResult struct {
	Key     Key
	Size    int64     // bytes stored
	Expires time.Time // when the backend drops it by itself
}
