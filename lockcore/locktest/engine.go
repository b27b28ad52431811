// Package locktest is an in-memory lockcore.Engine for tests: the
// adapters (package middleware, package interceptor) run on it without a
// Redis, and a test can do to it what is hard to arrange on a real backend:
// take the backend away (SetUnavailable), end a live hold as lost (Lose,
// or LoseWith a cause such as lockcore.ErrRevoked), see who holds and who
// waits (Held, Waiters, Await), and read back the Policy of every
// acquisition (Calls). Its Events, if set, is told what it does, as an
// engine that reports events tells its lockcore.Events.
//
// It follows the steps of lockcore.Engine faithfully: one exclusive hold
// per key with a fencing counter per key, a fresh owner token
// (lockcore.NewToken) for every fresh hold, in-memory re-entry through
// lockcore.Reenter, re-entry of a hold owned by one of lockcore.TokensFrom
// (what a propagated header or metadata entry brings) as one more entry of
// that hold, and waiting in arrival order on channels. The key is freed,
// and handed to its oldest waiter, when the hold's last entry is released.
//
// Leases never expire on their own: the fake keeps every hold alive until it
// is released or taken away with Lose.
package locktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/lockcore"
)

// DefaultTTL is the lease length of a Policy without a TTL.
const DefaultTTL = 10 * time.Second

var (
	// ErrLost is the cause with which Lose cancels the contexts of a
	// hold's leases. It matches lockcore.ErrLockLost.
	ErrLost = fmt.Errorf("%w: locktest: taken away by Engine.Lose", lockcore.ErrLockLost)

	// ErrDown is what Acquire returns while the engine is unavailable. It
	// matches lockcore.ErrUnavailable.
	ErrDown = fmt.Errorf("%w: locktest: engine set unavailable", lockcore.ErrUnavailable)
)

// Call is one call of Engine.Acquire, as it was made.
type Call struct {
	Key    lockcore.Key
	Policy lockcore.Policy
}

// Engine is an in-memory lockcore.Engine. The zero Engine is ready to use;
// it must not be copied after first use. All methods are safe for
// concurrent use.
type Engine struct {
	// Events, if set, is told what the engine does, as lockcore.Events
	// describes: Waiting when an acquisition starts and stops waiting;
	// Woken when a waiter is handed the lock (WakeMessage: the release that
	// freed the key told it) or its wait ran out (WakeTimer); Ended when a
	// fresh hold (a fresh acquisition, or a token re-entry, which is a hold
	// of its own) is released or lost. The fake never renews, so Renewed is
	// never called. Waiting(key, +1) is called with the engine's lock held,
	// so that a waiter is counted before Waiters or Await can see it, and
	// so is Ended of a loss, before the lease's context is cancelled (see
	// LoseWith); the other calls are made without it. Set it before the
	// first Acquire.
	Events lockcore.Events

	mu      sync.Mutex
	keys    map[lockcore.Key]*keyState
	calls   []Call
	down    bool
	changed chan struct{} // closed and replaced on every change (see Await)
}

// New returns an empty Engine.
func New() *Engine { return new(Engine) }

// keyState is what the backend knows of one key. It is kept after the key
// is freed, so that its fencing counter only grows.
type keyState struct {
	key     lockcore.Key
	counter int64         // the last fencing token handed out
	token   string        // owner of the live hold; "" when the key is free
	fence   int64         // fencing token of the live hold
	ttl     time.Duration // lease length of the live hold
	entries []*hold       // the live hold's entries: its fresh acquisition and token re-entries
	queue   []*waiter     // in arrival order; empty while the key is free
}

// hold is one entry of a key's hold: what a lease wraps.
type hold struct {
	e     *Engine
	ks    *keyState
	ls    *lockcore.Lease
	start time.Time             // when it was taken, for Events.Ended
	lost  atomic.Pointer[error] // the cause of its loss; read by Check without the mutex
	done  bool                  // released or lost; guarded by e.mu
	quiet bool                  // given back before Acquire returned it: no Events.Ended; guarded by e.mu
}

// waiter is one blocked acquisition.
type waiter struct {
	ctx   context.Context
	ttl   time.Duration
	ready chan struct{}   // closed when granted
	ls    *lockcore.Lease // the granted lease; guarded by e.mu
}

// Acquire implements lockcore.Engine. It records the call (Calls), then
// validates key and p: a zero key fails with lockcore.ErrInvalidKey, a TTL
// below lockcore.MinTTL with an error; a TTL of 0 is DefaultTTL. A context
// that holds the key through this engine re-enters it in memory (even while
// the engine is unavailable). Otherwise, while the engine is unavailable,
// it fails with ErrDown; a free key is taken for a fresh hold; a hold owned
// by one of lockcore.TokensFrom(ctx) gets one more entry under its token;
// and a hold of another owner fails at once with a
// *lockcore.ContentionError when p.Wait is 0, or is waited for in arrival
// order up to p.Wait (then a ContentionError with TimedOut) or until ctx
// ends (then errors.Join of a ContentionError, TimedOut for a deadline, and
// ctx.Err()). RetryAfter is the holder's TTL: the fake renews perfectly.
// On error nothing is held or queued.
func (e *Engine) Acquire(ctx context.Context, key lockcore.Key, p lockcore.Policy) (*lockcore.Lease, error) {
	e.mu.Lock()
	e.calls = append(e.calls, Call{Key: key, Policy: p})
	e.notify()
	e.mu.Unlock()

	if key.IsZero() {
		return nil, fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey)
	}
	ttl := p.TTL
	switch {
	case ttl == 0:
		ttl = DefaultTTL
	case ttl < lockcore.MinTTL:
		return nil, fmt.Errorf("locktest: TTL %v is below the minimum %v", ttl, lockcore.MinTTL)
	}
	if ls := lockcore.Reenter(ctx, e, key); ls != nil {
		return ls, nil
	}

	e.mu.Lock()
	if e.down {
		e.mu.Unlock()
		return nil, ErrDown
	}
	ks := e.state(key)
	if err := ctx.Err(); err != nil {
		ce := &lockcore.ContentionError{Key: key.String(), RetryAfter: ks.retryAfter()}
		e.mu.Unlock()
		return nil, errors.Join(ce, err)
	}
	switch {
	case ks.token == "":
		ls := e.take(ks, ctx, ttl)
		e.mu.Unlock()
		return ls, nil
	case slices.Contains(lockcore.TokensFrom(ctx), ks.token):
		h := &hold{e: e, ks: ks, start: time.Now()}
		h.ls = lockcore.NewLease(ctx, e, key, ks.token, ks.fence, h)
		ks.entries = append(ks.entries, h)
		e.notify()
		e.mu.Unlock()
		return h.ls, nil
	case p.Wait <= 0:
		ce := &lockcore.ContentionError{Key: key.String(), RetryAfter: ks.retryAfter()}
		e.mu.Unlock()
		return nil, ce
	}
	w := &waiter{ctx: ctx, ttl: ttl, ready: make(chan struct{})}
	ks.queue = append(ks.queue, w)
	if ev := e.Events; ev != nil {
		ev.Waiting(key, 1) // before Waiters or Await can see the waiter
		defer ev.Waiting(key, -1)
	}
	e.notify()
	e.mu.Unlock()

	timer := time.NewTimer(p.Wait)
	defer timer.Stop()
	select {
	case <-w.ready:
		e.woken(key, lockcore.WakeMessage)
		return w.ls, nil
	case <-timer.C:
		e.woken(key, lockcore.WakeTimer)
		e.mu.Lock()
		defer e.mu.Unlock()
		if w.ls != nil {
			return w.ls, nil // granted as the wait ran out
		}
		e.dequeue(ks, w)
		return nil, &lockcore.ContentionError{Key: key.String(), RetryAfter: ks.retryAfter(), TimedOut: true}
	case <-ctx.Done():
		err := ctx.Err()
		ce := &lockcore.ContentionError{Key: key.String(), TimedOut: errors.Is(err, context.DeadlineExceeded)}
		e.mu.Lock()
		ls := w.ls
		if ls == nil {
			e.dequeue(ks, w)
			ce.RetryAfter = ks.retryAfter()
		} else {
			ls.Hold().(*hold).quiet = true // never handed out: not a hold to report
		}
		e.mu.Unlock()
		if ls != nil {
			// Granted as ctx ended: give it back, to the next waiter.
			_ = ls.Release(context.Background())
		}
		return nil, errors.Join(ce, err)
	}
}

// woken tells Events that a waiter of key woke, by what.
func (e *Engine) woken(key lockcore.Key, by lockcore.Wake) {
	if ev := e.Events; ev != nil {
		ev.Woken(key, by)
	}
}

// state returns the state of key, made on first use. e.mu is held.
func (e *Engine) state(key lockcore.Key) *keyState {
	if e.keys == nil {
		e.keys = make(map[lockcore.Key]*keyState)
	}
	ks := e.keys[key]
	if ks == nil {
		ks = &keyState{key: key}
		e.keys[key] = ks
	}
	return ks
}

// retryAfter is the hint of a ContentionError: the holder's remaining lease,
// which is its TTL since the fake renews it perfectly; 0 when free.
func (ks *keyState) retryAfter() time.Duration {
	if ks.token == "" {
		return 0
	}
	return ks.ttl
}

// take makes a fresh hold of the free key ks for an acquisition with ctx
// and returns its lease. e.mu is held.
func (e *Engine) take(ks *keyState, ctx context.Context, ttl time.Duration) *lockcore.Lease {
	ks.counter++
	ks.token, ks.fence, ks.ttl = lockcore.NewToken(), ks.counter, ttl
	h := &hold{e: e, ks: ks, start: time.Now()}
	h.ls = lockcore.NewLease(ctx, e, ks.key, ks.token, ks.fence, h)
	ks.entries = []*hold{h}
	e.notify()
	return h.ls
}

// free frees ks and hands it to its oldest waiter, if any. e.mu is held.
func (e *Engine) free(ks *keyState) {
	ks.token, ks.fence, ks.ttl, ks.entries = "", 0, 0, nil
	if len(ks.queue) > 0 {
		w := ks.queue[0]
		ks.queue = slices.Delete(ks.queue, 0, 1)
		w.ls = e.take(ks, w.ctx, w.ttl)
		close(w.ready)
	}
	e.notify()
}

// dequeue removes w from the queue of ks. e.mu is held.
func (e *Engine) dequeue(ks *keyState, w *waiter) {
	ks.queue = slices.DeleteFunc(ks.queue, func(x *waiter) bool { return x == w })
	e.notify()
}

// notify wakes Await. e.mu is held.
func (e *Engine) notify() {
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// Check implements lockcore.Hold: nil until Lose or LoseWith took the hold
// away, then the cause it was taken away with.
func (h *hold) Check() error {
	if cause := h.lost.Load(); cause != nil {
		return *cause
	}
	return nil
}

// Release implements lockcore.Hold: it drops this entry of the hold and
// frees the key, for its oldest waiter, when none is left, and then tells
// Events that the hold ended (lockcore.ErrReleased). Releasing an entry
// that Lose took away changes nothing. It never fails.
func (h *hold) Release(ctx context.Context) error {
	e := h.e
	begin := time.Now()
	e.mu.Lock()
	if h.done {
		e.mu.Unlock()
		return nil
	}
	h.done = true
	ks := h.ks
	ks.entries = slices.DeleteFunc(ks.entries, func(x *hold) bool { return x == h })
	if len(ks.entries) == 0 {
		e.free(ks)
	}
	e.notify()
	quiet := h.quiet
	e.mu.Unlock()
	if ev := e.Events; ev != nil && !quiet {
		end := time.Now()
		ev.Ended(ctx, ks.key, end.Sub(h.start), end.Sub(begin), lockcore.ErrReleased, nil)
	}
	return nil
}

// Lose ends the live hold of key as lost, as a backend that expired or
// handed it over would: the contexts of all its leases (its fresh
// acquisition, its token re-entries and their in-memory re-entries) are
// cancelled with cause ErrLost, which matches lockcore.ErrLockLost, before
// the key goes to its oldest waiter or is freed. It reports whether key
// had a live hold.
func (e *Engine) Lose(key lockcore.Key) bool { return e.LoseWith(key, ErrLost) }

// LoseWith is Lose with cause in place of ErrLost: lockcore.ErrRevoked, or
// an error wrapping it, plays a force-release (lockcore.Operator.Revoke).
// Events is told of each entry's end, with cause, with the engine's lock
// held and before the entry's lease contexts are cancelled: a handler that
// returns when its context ends has not yet returned, so the request's
// span is still open for what Events records on it.
//
// Panics if cause does not match lockcore.ErrLockLost.
func (e *Engine) LoseWith(key lockcore.Key, cause error) bool {
	if !errors.Is(cause, lockcore.ErrLockLost) {
		panic(fmt.Sprintf("locktest: LoseWith(%v): the cause must match lockcore.ErrLockLost", cause))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ks := e.keys[key]
	if ks == nil || ks.token == "" {
		return false
	}
	end := time.Now()
	for _, h := range ks.entries {
		if ev := e.Events; ev != nil {
			ev.Ended(h.ls.Context(), key, end.Sub(h.start), 0, cause, nil)
		}
		h.done = true
		h.lost.Store(&cause)
		lockcore.Lose(h.ls, cause)
	}
	e.free(ks)
	return true
}

// SetUnavailable makes the backend unreachable (down) or reachable again:
// while down, every Acquire that does not re-enter in memory fails with
// ErrDown, which matches lockcore.ErrUnavailable. Holds, waiters and
// releases are not affected.
func (e *Engine) SetUnavailable(down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.down = down
	e.notify()
}

// Held returns the fencing token of the live hold of key and its number of
// entries in the backend (its fresh acquisition plus its token re-entries;
// in-memory re-entries are not entries), or 0, 0 when key is free.
func (e *Engine) Held(key lockcore.Key) (fence int64, entries int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ks := e.keys[key]; ks != nil && ks.token != "" {
		return ks.fence, len(ks.entries)
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

// Calls returns every Acquire call made so far, in order.
func (e *Engine) Calls() []Call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls)
}

// Await blocks until cond reports true, asking it at once and again after
// every change of the engine (an Acquire call, a hold taken, entered,
// released or lost, a waiter queued or gone, SetUnavailable), or until ctx
// ends, whose error it then returns. cond may call the engine's inspection
// methods (Held, Waiters, Calls); it runs without the engine's lock.
func (e *Engine) Await(ctx context.Context, cond func() bool) error {
	for {
		e.mu.Lock()
		if e.changed == nil {
			e.changed = make(chan struct{})
		}
		ch := e.changed
		e.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
