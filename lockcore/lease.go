package lockcore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// hold states
const (
	holdLive int32 = iota
	holdReleased
	holdLost
)

// hold is one Redis-level hold of a key by a token, shared by the in-process
// leases that re-entered it through their context.
type hold struct {
	l      *Locker
	key    Key
	keys   [3]string // lock, queue, fence
	args   [5]any    // keys, token and entry boxed once, for the scripts
	token  string    // the owner token of the hold in Redis
	others string    // tokens that may re-enter a hold they own, for the acquire script
	entry  string    // the attempt id that holds the lock in Redis
	fence  int64
	ttl    time.Duration
	refs   atomic.Int32 // outstanding leases; the Redis release runs at 0
	state  atomic.Int32
	ctx    context.Context
	cancel context.CancelCauseFunc

	st    ctxState // what ctx carries
	first Lease    // the lease of the acquisition that made the hold

	// Watchdog bookkeeping, guarded by the watchdog's mutex.
	index int       // in the watchdog heap; -1 when not scheduled
	at    time.Time // when the watchdog acts on it next: renewal or loss

	// valid is when the lease stops being certainly held, in monotonic
	// nanoseconds since monoBase. The watchdog sets it; Err reads it
	// without the watchdog's mutex.
	valid atomic.Int64
}

// monoBase anchors mono: time.Since reads the monotonic clock.
var monoBase = time.Now()

// mono returns the monotonic clock in nanoseconds since monoBase.
func mono() int64 { return int64(time.Since(monoBase)) }

// validUntil returns the local time until which the lease is certainly held.
func (h *hold) validUntil() time.Time { return monoBase.Add(time.Duration(h.valid.Load())) }

// setValidUntil sets the local time until which the lease is certainly held.
func (h *hold) setValidUntil(t time.Time) { h.valid.Store(int64(t.Sub(monoBase))) }

// errRanOut is the cause of a lease whose renewals failed until it ran out.
var errRanOut = fmt.Errorf("%w: renewals failed until the lease ran out", ErrLockLost)

func (h *hold) live() bool { return h.state.Load() == holdLive }

// certain reports whether the lease is certainly held now: live, and its
// local validity has not run out. A live hold whose validity ran out, which
// the watchdog may not have noticed yet, is lost here and now.
func (h *hold) certain() bool {
	if !h.live() {
		return false
	}
	if mono() < h.valid.Load() {
		return true
	}
	h.lose(errRanOut)
	return false
}

// setEntry makes id the hold's entry in Redis.
func (h *hold) setEntry(id string) {
	h.entry = id
	h.args[4] = id
}

// retain adds a lease to a hold that is certainly held; it fails once the
// hold is released or lost.
func (h *hold) retain() bool {
	for {
		r := h.refs.Load()
		if r <= 0 || !h.certain() {
			return false
		}
		if h.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// lose marks the hold lost and cancels its context; it reports whether this
// call did it.
func (h *hold) lose(cause error) bool {
	if !h.state.CompareAndSwap(holdLive, holdLost) {
		return false
	}
	h.cancel(cause)
	return true
}

// Lease is a held lock. Its Context is cancelled, with cause ErrLockLost,
// if the lease is lost while held. Release it exactly once.
type Lease struct {
	h        *hold
	ctx      context.Context
	released atomic.Bool
}

// Key returns the locked resource.
func (ls *Lease) Key() Key { return ls.h.key }

// Token returns the owner token that holds the lock.
func (ls *Lease) Token() string { return ls.h.token }

// Fence returns the fencing token of the hold: strictly greater than that of
// every earlier hold of the key. A re-entrant acquisition returns the fencing
// token of the hold it re-entered.
func (ls *Lease) Fence() int64 { return ls.h.fence }

// Context returns a context derived from the one given to Acquire that
// carries the owner token and this hold (see FencingToken and HeldFrom) and
// is cancelled with cause ErrLockLost when the lease is lost, or with
// ErrReleased once the hold is released.
func (ls *Lease) Context() context.Context { return ls.ctx }

// Done returns a channel closed when the hold ends: lost or released.
func (ls *Lease) Done() <-chan struct{} { return ls.h.ctx.Done() }

// Err returns nil while the lease is certainly held, ErrLockLost (possibly
// wrapped) once lost, and ErrReleased once released. It reads the clock: a
// lease whose renewals have failed until its local validity ran out is lost
// at once, even if the watchdog, delayed by the scheduler, has not yet
// cancelled the Context. Check it right before a write that the lock
// protects (and pass Fence along, for the store to check too).
func (ls *Lease) Err() error {
	h := ls.h
	if h.certain() {
		return nil
	}
	if err := context.Cause(h.ctx); err != nil {
		return err
	}
	// Lost or released by another goroutine, which has yet to cancel the
	// context.
	if h.state.Load() == holdReleased {
		return ErrReleased
	}
	return ErrLockLost
}

// Release gives up this lease. The Redis hold is released when the last
// in-process lease on it is released: its entry in Redis is dropped, and
// when none is left the key goes to the next waiter or is deleted. The call
// runs detached from ctx's cancellation and waits for Redis at most
// Options.ReleaseTimeout; a release not answered by then goes on in the
// background. Releasing twice, or after a client re-sent the call, changes
// nothing more.
//
// It returns ErrReleased for a second call, ErrLockLost if the lease was
// lost before (its local validity ran out, or the watchdog found it gone),
// and an error matching ErrUnavailable if Redis did not answer in time; the
// key then expires at the end of its TTL unless the release lands later.
func (ls *Lease) Release(ctx context.Context) error {
	if !ls.released.CompareAndSwap(false, true) {
		return ErrReleased
	}
	h := ls.h
	if h.refs.Add(-1) > 0 {
		return nil // an outer lease in this process still holds it
	}
	l := h.l
	l.wd.remove(h)
	h.certain() // a lease that ran out is lost, not released
	wasLive := h.state.CompareAndSwap(holdLive, holdReleased)
	if wasLive {
		h.cancel(ErrReleased)
	}
	// A reply of -1 while the lease was valid means Redis no longer has this
	// entry although nobody else could have taken the lock: a run of this
	// same call, re-sent by the client after a lost reply, released it.
	_, err := l.release(ctx, h, "")
	switch {
	case !wasLive:
		return ErrLockLost
	case err != nil:
		return unavailable("release", err)
	}
	return nil
}

// DefaultWait is how long the HTTP middleware and the gRPC interceptors
// wait for a busy lock when their configuration says nothing.
const DefaultWait = 5 * time.Second

// WaitPolicy returns the Policy of an adapter's configuration, where a
// wait of 0 means DefaultWait and a negative one fails fast.
func WaitPolicy(wait, ttl time.Duration) Policy {
	switch {
	case wait == 0:
		wait = DefaultWait
	case wait < 0:
		wait = 0
	}
	return Policy{Wait: wait, TTL: ttl}
}

// Policy says how to acquire one lock.
type Policy struct {
	// Wait is how long to wait for a lock held by another owner; 0 fails at
	// once. The wait also ends with the context given to Acquire.
	Wait time.Duration
	// TTL is the lease length; 0 means Options.TTL. Minimum 30ms.
	TTL time.Duration
}

// Acquire takes the lock on key.
//
// When ctx already holds key, Acquire re-enters: if ctx descends from a
// live lease on key from this Locker, in memory without a Redis call; if
// the hold in Redis is owned by one of the tokens ctx carries (those of its
// other locks and those given to WithToken, as a propagated call brings
// them), by adding this attempt to the hold's entries. Otherwise it takes
// the lock, if free, with a freshly minted owner token (NewToken), which
// the lease's context carries on; or fails with a *ContentionError matching
// ErrNotAcquired (fail fast) or, after waiting up to p.Wait, ErrWaitTimeout.
// A waiter is queued in Redis and woken when the lock is handed to it, in
// arrival order.
//
// Errors match ErrInvalidKey, ErrNotAcquired, ErrUnavailable or ErrClosed;
// when ctx ends while waiting, the error also matches ctx.Err(). A call
// that Redis does not answer within Options.Timeout, or by ctx's deadline,
// fails with ErrUnavailable. On error nothing is held: an attempt whose
// call may have reached Redis is withdrawn (in the background when Redis
// is not answering).
func (l *Locker) Acquire(ctx context.Context, key Key, p Policy) (*Lease, error) {
	if key.IsZero() {
		return nil, fmt.Errorf("%w: zero Key", ErrInvalidKey)
	}
	if p.TTL == 0 {
		p.TTL = l.opt.TTL
	} else if p.TTL < MinTTL {
		return nil, fmt.Errorf("lockcore: TTL %v is below the minimum %v", p.TTL, MinTTL)
	}
	if l.closed.Load() {
		return nil, ErrClosed
	}
	st := stateFrom(ctx)
	var others string
	if st != nil {
		for s := st; s != nil; s = s.parent {
			if h := s.held; h != nil && h.l == l && h.key == key && h.retain() {
				return &Lease{h: h, ctx: ctx}, nil
			}
		}
		others = strings.Join(st.tokens(), " ")
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(&ContentionError{Key: key.s, err: ErrNotAcquired}, err)
	}
	h := l.newHold(key, NewToken(), p.TTL)
	h.others = others
	sent, length, err := l.acquire(ctx, h, p.Wait)
	if err != nil {
		return nil, err
	}
	h.refs.Store(1)
	hctx, cancel := context.WithCancelCause(ctx)
	h.cancel = cancel
	h.st = ctxState{token: h.token, held: h, parent: st}
	h.ctx = context.WithValue(hctx, ctxKey{}, &h.st)
	h.first = Lease{h: h, ctx: h.ctx}
	if !l.wd.add(h, sent, length) {
		// Closed while acquiring: give it back.
		h.refs.Store(0)
		h.state.Store(holdReleased)
		cancel(ErrClosed)
		l.withdraw(h, "")
		return nil, ErrClosed
	}
	return &h.first, nil
}

func (l *Locker) newHold(key Key, tok string, ttl time.Duration) *hold {
	h := &hold{l: l, key: key, keys: l.redisKeys(key), token: tok, ttl: ttl, index: -1}
	h.args = [5]any{h.keys[0], h.keys[1], h.keys[2], tok}
	return h
}
