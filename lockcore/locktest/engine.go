// Package locktest is for testing with locks: an in-memory engine, Engine,
// on which a program's HTTP handlers and gRPC methods run in their tests
// without a Redis, and Run, the conformance suite that every engine passes
// (the in-memory one and package redisengine's included) and that a new
// engine runs in its own tests.
//
// Engine is an engine of equal rank: a lockcore.Engine, as the Redis
// engine is, that makes every promise the Redis engine makes (exclusive
// holds, fencing tokens, waiting in arrival order, shared holds and
// permits, token re-entry, results kept with a release for idempotency
// keys; the Locker re-enters in memory), and a
// lockcore.Operator, whose Revoke plays a lost lock. It is for tests, not
// for production: its locks live in one process and its leases never
// expire.
package locktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/lockcore"
)

// defaultTTL is the lease length of a Policy without a TTL.
const defaultTTL = 10 * time.Second

// auditKeep is how many audit records a key keeps, newest first.
const auditKeep = 100

// instance is the engine id the Operator methods name the engine by.
const instance = "locktest"

// Engine is an in-memory lockcore.Engine, lockcore.Operator,
// lockcore.Gatekeeper and lockcore.Results; give it to lock.FromEngine,
// which owns the leases of its holds. The zero Engine is ready to use; it
// must not be copied after first use. All methods are safe for concurrent
// use.
type Engine struct {
	// Events, if set, is told what the engine does, as lockcore.Events
	// describes: Waiting when an acquisition starts and stops waiting;
	// Woken when a waiter is handed the lock ("message") or its wait ran
	// out ("timer"); Ended, by the Locker that serves the engine (Run's
	// is given the same Events; a lock.Locker tells its observers'), when
	// a fresh hold (a fresh acquisition, or a token re-entry,
	// which is a hold of its own) is released or revoked. The engine never
	// renews, so Renewed is never called. Waiting(key, +1) is called with
	// the engine's lock held, so that a waiter is counted before Inspect or
	// Await can see it; the other calls are made without it (Ended of a
	// revocation just after Revoke returns, before the lease's context is
	// cancelled). Set it before the first Take.
	Events lockcore.Events

	// Name is the instance name the Operator methods show for the engine
	// (lockcore.Holder.Names, lockcore.Waiter.Name), beside its engine id
	// "locktest". Default: "locktest". Set it before the first Acquire.
	Name string

	mu      sync.Mutex
	keys    map[lockcore.Key]*keyState
	gates   map[lockcore.Key]lockcore.Gate // the closed ones
	changed chan struct{}                  // closed and replaced on every change (see Await)
	results map[lockcore.Key]result        // the kept results (lockcore.Results)
	defects defects                        // deliberate faults, set only by this package's tests
	closed  bool                           // Close was called
	shut    chan struct{}                  // closed by Close: its waiters give up
}

// keyState is what the backend knows of one key. It is kept after the key
// is freed, so that its fencing counter only grows.
type keyState struct {
	key     lockcore.Key
	counter int64     // the last fencing token handed out
	owners  []*owner  // the live holds: one exclusive, or any number of shared ones
	queue   []*waiter // in arrival order
	audit   []lockcore.Revocation
	held    time.Duration // mean of how long its released holds lasted; 0 before the first
}

// owner is one live hold of a key by one owner token.
type owner struct {
	token   string
	fence   int64
	ttl     time.Duration
	since   time.Time
	share   int     // the Policy's Share; 0 for an exclusive hold
	slot    int     // among the key's permits; -1 for none
	entries []*hold // its fresh acquisition and token re-entries
	route   string  // Policy.Route of its fresh acquisition
	trace   string  // Policy.Trace of its fresh acquisition
}

// hold is one entry of a key's hold: the lockcore.Hold a lease is made
// of.
type hold struct {
	e    *Engine
	ks   *keyState
	o    *owner
	lost atomic.Pointer[error] // the cause of its loss; read by Err without the mutex
	gone chan struct{}         // closed when it is lost or released
	done bool                  // released or lost; guarded by e.mu
	kept bool                  // released by a Keep that stored its result; guarded by e.mu
}

// newHold returns a fresh entry of o's hold of ks.
func (e *Engine) newHold(ks *keyState, o *owner) *hold {
	h := &hold{e: e, ks: ks, o: o, gone: make(chan struct{})}
	o.entries = append(o.entries, h)
	return h
}

// Shared implements lockcore.Hold.
func (h *hold) Shared() (int, bool) { return h.o.slot, h.o.share != 0 }

// Fence implements lockcore.Hold.
func (h *hold) Fence() int64 { return h.o.fence }

// Token implements lockcore.Hold.
func (h *hold) Token() string { return h.o.token }

// Done implements lockcore.Hold: closed when the hold is revoked or
// released.
func (h *hold) Done() <-chan struct{} { return h.gone }

// waiter is one blocked acquisition.
type waiter struct {
	ttl      time.Duration
	share    int
	token    string   // the Request's Token
	join     []string // and its Join
	since    time.Time
	deadline time.Time
	route    string        // Policy.Route
	trace    string        // Policy.Trace
	ready    chan struct{} // closed when granted, or a result found
	h        *hold         // the granted hold; guarded by e.mu
	result   bool          // the Request's Result
	found    []byte        // the result kept while it waited; guarded by e.mu
}

// Promises implements lockcore.Engine: the in-memory engine makes every
// promise (a defect planted in it breaks the one it names).
func (e *Engine) Promises() lockcore.Promises {
	return lockcore.Promises{FIFO: true, OrderedFences: true, TokenReentry: true, Shared: true, Permits: true, Results: true}
}

// errLostClosed is the cause of a hold lost to Close.
var errLostClosed = fmt.Errorf("%w: %w", lockcore.ErrLockLost, lockcore.ErrClosed)

// Close implements lockcore.Engine: from then on every acquisition fails
// with lockcore.ErrClosed, and so do the engine's waiters; its holds are
// lost, with a cause matching lockcore.ErrLockLost and ErrClosed. Its
// Operator and Gatekeeper methods still answer (GateOf gives the gate
// with ErrClosed, which refuses the acquisition). Closing twice changes
// nothing.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	close(e.shutdown())
	for _, ks := range e.keys {
		if len(ks.owners) > 0 {
			e.lose(ks, errLostClosed)
			ks.owners = nil
		}
	}
	e.notify()
	return nil
}

// shutdown returns the channel Close closes. e.mu is held.
func (e *Engine) shutdown() chan struct{} {
	if e.shut == nil {
		e.shut = make(chan struct{})
	}
	return e.shut
}

// Take implements lockcore.Engine: a TTL of 0 is 10 seconds. A free key
// is taken for a fresh hold; a hold owned by one of r.Join gets one more
// entry under its token; and a hold of another owner fails at once with a
// *lockcore.ContentionError when r.Wait is lockcore.FailFast, or is waited
// for in arrival order up to r.Wait (then a ContentionError with TimedOut)
// or until ctx ends (then errors.Join of a ContentionError, TimedOut for a
// deadline, and ctx.Err()). RetryAfter is how long the key's released
// holds lasted (a weighted mean), or 100ms before any was released, and
// never more than the holder's TTL (the engine renews perfectly). On error
// nothing is held or queued.
func (e *Engine) Take(ctx context.Context, r lockcore.Request) (lockcore.Hold, error) {
	key, p := r.Key, r
	ttl := p.TTL
	if ttl == 0 {
		ttl = defaultTTL
	}
	if e.defects.waitIgnored {
		p.Wait = lockcore.FailFast
	}
	if !r.GateChecked && r.Share >= 0 && !r.Restock {
		// The Locker did not ask GateOf (it does not know these gates: a
		// wrapper that is no Gatekeeper hides them).
		if _, err := e.GateOf(ctx, key); err != nil {
			return nil, err
		}
	}

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, lockcore.ErrClosed
	}
	ks := e.state(key)
	if err := ctx.Err(); err != nil {
		ce := &lockcore.ContentionError{Key: key.String(), RetryAfter: ks.retryAfter()}
		e.mu.Unlock()
		return nil, errors.Join(ce, err)
	}
	if res, ok := e.result(key, time.Now()); ok && r.Result {
		e.mu.Unlock()
		return nil, &lockcore.ResultFound{Result: bytes.Clone(res.res)}
	}
	o := ks.ownedBy(r.Join)
	switch {
	case o != nil && !e.defects.ignoreTokens:
		if o.share != 0 && p.Share == 0 {
			e.mu.Unlock()
			return nil, fmt.Errorf("%w: %s", lockcore.ErrUpgrade, key)
		}
		h := e.newHold(ks, o)
		e.notify()
		e.mu.Unlock()
		return h, nil
	case (len(ks.queue) == 0 || e.defects.readersPass && p.Share != 0) && ks.admits(p.Share) || e.defects.grantTwice && len(ks.owners) == 1 && len(ks.owners[0].entries) == 1:
		h := e.take(ks, r.Token, r.Join, ttl, p.Share, p.Route, trimTrace(p.Trace))
		e.mu.Unlock()
		return h, nil
	case p.Wait <= 0:
		ce := &lockcore.ContentionError{Key: key.String(), RetryAfter: ks.retryAfter()}
		e.mu.Unlock()
		return nil, ce
	}
	now := time.Now()
	w := &waiter{token: r.Token, join: r.Join, ttl: ttl, share: p.Share, since: now, deadline: now.Add(p.Wait), route: p.Route, trace: trimTrace(p.Trace), ready: make(chan struct{}), result: r.Result && p.Share == 0}
	if d, ok := ctx.Deadline(); ok && d.Before(w.deadline) {
		w.deadline = d
	}
	ks.queue = append(ks.queue, w)
	if ev := e.Events; ev != nil {
		ev.Waiting(key, 1) // before Inspect or Await can see the waiter
		defer ev.Waiting(key, -1)
	}
	e.notify()
	shut := e.shutdown()
	e.mu.Unlock()

	timer := time.NewTimer(p.Wait)
	defer timer.Stop()
	select {
	case <-w.ready:
		e.woken(key, wokenByMessage)
		if w.h == nil {
			return nil, &lockcore.ResultFound{Result: w.found}
		}
		return w.h, nil
	case <-timer.C:
		e.woken(key, wokenByTimer)
		e.mu.Lock()
		defer e.mu.Unlock()
		if w.h != nil {
			return w.h, nil // granted as the wait ran out
		}
		if w.found != nil {
			return nil, &lockcore.ResultFound{Result: w.found}
		}
		e.dequeue(ks, w)
		return nil, &lockcore.ContentionError{Key: key.String(), RetryAfter: ks.retryAfter(), TimedOut: true}
	case <-shut:
		e.mu.Lock()
		h := w.h
		if h == nil {
			e.dequeue(ks, w)
		}
		e.mu.Unlock()
		if h != nil {
			_ = h.Release(context.Background(), lockcore.ErrClosed)
		}
		return nil, lockcore.ErrClosed
	case <-ctx.Done():
		err := ctx.Err()
		ce := &lockcore.ContentionError{Key: key.String(), TimedOut: errors.Is(err, context.DeadlineExceeded)}
		e.mu.Lock()
		h := w.h
		if h == nil {
			if !e.defects.keepWaiter {
				e.dequeue(ks, w)
			}
			ce.RetryAfter = ks.retryAfter()
		}
		e.mu.Unlock()
		if h != nil {
			// Granted as ctx ended: give it back, to the next waiter.
			_ = h.Release(context.Background(), err)
		}
		return nil, errors.Join(ce, err)
	}
}

// What woke a waiter, as Events.Woken is told.
const (
	wokenByMessage = "message"
	wokenByTimer   = "timer"
)

// woken tells Events that a waiter of key woke, by what.
func (e *Engine) woken(key lockcore.Key, by string) {
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

// firstRetry is the hint of a ContentionError while no hold of the key
// was released yet, as the Redis engine's (see
// lockcore.ContentionError.RetryAfter).
const firstRetry = 100 * time.Millisecond

// retryAfter is the hint of a ContentionError: how long the key's holds
// lasted (an exponentially weighted mean, as the Redis engine keeps), or
// firstRetry before any was released; never more than the holders' longest
// remaining lease, which is their TTL since the engine renews perfectly;
// 0 when free.
func (ks *keyState) retryAfter() time.Duration {
	var d time.Duration
	for _, o := range ks.owners {
		d = max(d, o.ttl)
	}
	if ks.held > 0 {
		return min(ks.held, d)
	}
	return min(firstRetry, d)
}

// ended adds a hold of ks that lasted d to its mean.
func (ks *keyState) ended(d time.Duration) {
	d = max(d, 1) // a mean of 0 is none
	if ks.held == 0 {
		ks.held = d
		return
	}
	ks.held += (d - ks.held) / 8
}

// ownedBy returns the live hold of ks owned by one of toks, or nil.
func (ks *keyState) ownedBy(toks []string) *owner {
	for _, o := range ks.owners {
		if slices.Contains(toks, o.token) {
			return o
		}
	}
	return nil
}

// admits reports whether ks, as it is held now, admits a fresh hold with
// Policy.Share share: when free; for a shared one, while no exclusive one
// is held and fewer than share (if positive) hold it.
func (ks *keyState) admits(share int) bool {
	if len(ks.owners) == 0 {
		return true
	}
	if share == 0 || ks.owners[0].share == 0 {
		return false
	}
	return share < 0 || len(ks.owners) < share
}

// take makes a fresh hold of ks, which admits it, for token and returns
// it; join is the Request's Join. e.mu is held.
func (e *Engine) take(ks *keyState, token string, join []string, ttl time.Duration, share int, route, trace string) *hold {
	ks.counter++
	if e.defects.fenceReset && len(ks.owners) == 0 {
		ks.counter = 1
	}
	o := &owner{token: token, fence: ks.counter, ttl: ttl, since: time.Now(), share: share, slot: -1, route: route, trace: trace}
	if e.defects.tokenTakesFree && len(join) > 0 {
		o.token = join[0]
	}
	if share > 0 {
		// The lowest slot no other holder has.
		for o.slot = 0; slices.ContainsFunc(ks.owners, func(x *owner) bool { return x.slot == o.slot }); o.slot++ {
		}
		if e.defects.slotReused {
			o.slot = 0
		}
	}
	ks.owners = append(ks.owners, o)
	h := e.newHold(ks, o)
	e.notify()
	return h
}

// admit hands ks to its waiters in arrival order, as long as it admits the
// first of them: the first exclusive one when ks is free, or a run of
// shared ones; none once the engine is closed. e.mu is held.
func (e *Engine) admit(ks *keyState) {
	for n := len(ks.queue); n > 0 && !e.closed; n = len(ks.queue) {
		i := 0
		if e.defects.lifo {
			i = n - 1
		}
		w := ks.queue[i]
		if !ks.admits(w.share) && !(e.defects.writerJoins && len(ks.owners) > 0 && ks.owners[0].share != 0) {
			break
		}
		ks.queue = slices.Delete(ks.queue, i, i+1)
		if r, ok := e.result(ks.key, time.Now()); ok && w.result && !e.defects.keepGrants {
			w.found = bytes.Clone(r.res) // it wants the result, which is there
		} else {
			w.h = e.take(ks, w.token, w.join, w.ttl, w.share, w.route, w.trace)
		}
		close(w.ready)
	}
	e.notify()
}

// dequeue removes w, which gave up, from the queue of ks, and admits the
// waiters behind it that the key now admits (readers behind a writer that
// gave up). e.mu is held.
func (e *Engine) dequeue(ks *keyState, w *waiter) {
	ks.queue = slices.DeleteFunc(ks.queue, func(x *waiter) bool { return x == w })
	e.admit(ks)
}

// notify wakes Await. e.mu is held.
func (e *Engine) notify() {
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// Err implements lockcore.Hold: nil until the hold was taken away, then
// the cause it was taken away with.
func (h *hold) Err() error {
	if cause := h.lost.Load(); cause != nil {
		return *cause
	}
	return nil
}

// Release implements lockcore.Hold: it drops this entry of the hold and
// frees the key, for its oldest waiter, when none is left. Releasing an
// entry that was taken away changes nothing. It never fails.
func (h *hold) Release(context.Context, error) error {
	e := h.e
	e.mu.Lock()
	if !h.done {
		e.drop(h)
	}
	e.mu.Unlock()
	return nil
}

// drop releases h, which is not done. e.mu is held.
func (e *Engine) drop(h *hold) {
	h.done = true
	close(h.gone)
	ks, o := h.ks, h.o
	o.entries = slices.DeleteFunc(o.entries, func(x *hold) bool { return x == h })
	if len(o.entries) == 0 {
		ks.owners = slices.DeleteFunc(ks.owners, func(x *owner) bool { return x == o })
		ks.ended(time.Since(o.since))
		e.admit(ks)
	}
	e.notify()
}

// lose ends the live hold of ks as lost with cause, which matches
// lockcore.ErrLockLost: each entry's Done is closed, so that lockcore
// loses its leases (telling Events of the entry's end before it cancels
// their contexts). The key is not freed. e.mu is held.
func (e *Engine) lose(ks *keyState, cause error) {
	for _, o := range ks.owners {
		for _, h := range o.entries {
			h.done = true
			if !e.defects.silentLoss {
				h.lost.Store(&cause)
				close(h.gone)
			}
		}
	}
}

// Inspect implements lockcore.Operator: the state of key, with a Holder
// for each owner while held (Count: the hold's fresh acquisition and token
// re-entries),
// its waiters in line, and its latest revocations.
func (e *Engine) Inspect(ctx context.Context, key lockcore.Key) (lockcore.Info, error) {
	if key == (lockcore.Key{}) {
		return lockcore.Info{}, fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	info := lockcore.Info{Key: key.String()}
	if ks := e.keys[key]; ks != nil {
		info = ks.info(e.name())
	}
	return info, nil
}

// name is the engine's instance name: Name, or "locktest".
func (e *Engine) name() string {
	if e.Name != "" {
		return e.Name
	}
	return instance
}

// trimTrace returns the first 64 bytes of a Policy.Trace, the most an
// engine keeps.
func trimTrace(t string) string {
	if len(t) > 64 {
		return strings.ToValidUTF8(t[:64], "")
	}
	return t
}

// info is the Info of ks, whose engine is named name. e.mu is held.
func (ks *keyState) info(name string) lockcore.Info {
	info := lockcore.Info{Key: ks.key.String(), LastFence: ks.counter, Audit: slices.Clone(ks.audit)}
	for _, o := range ks.owners {
		info.Holders = append(info.Holders, lockcore.Holder{
			Owner:     operate.OwnerDigest(o.token),
			Count:     len(o.entries),
			Instances: []string{instance},
			Names:     []string{name},
			Route:     o.route,
			Trace:     o.trace,
			Since:     o.since,
			Fence:     o.fence,
			Share:     o.share,
			Slot:      o.slot,
		})
		info.Fence, info.TTL = max(info.Fence, o.fence), max(info.TTL, o.ttl)
	}
	for _, w := range ks.queue {
		info.Waiters = append(info.Waiters, lockcore.Waiter{Instance: instance, Name: name, Route: w.route, Trace: w.trace, Since: w.since, Deadline: w.deadline, Share: w.share})
	}
	return info
}

// List implements lockcore.Operator: the held or awaited keys that start
// with prefix, in key order, at most limit of them (limit <= 0: all).
func (e *Engine) List(ctx context.Context, prefix string, limit int) ([]lockcore.Info, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var locks []lockcore.Info
	for k, ks := range e.keys {
		if (len(ks.owners) > 0 || len(ks.queue) > 0) && strings.HasPrefix(k.String(), prefix) {
			locks = append(locks, ks.info(e.name()))
		}
	}
	sort.Slice(locks, func(i, j int) bool { return locks[i].Key < locks[j].Key })
	if limit > 0 && len(locks) > limit {
		return locks[:limit], true, nil
	}
	return locks, false, nil
}

// Revoke implements lockcore.Operator: it takes the hold of key away from
// its owner (every owner of a shared one), as a backend that lost it
// would: the key's fencing counter moves past the revoked hold's fence,
// and the key goes to its oldest waiter or is freed. Its leases (its fresh
// acquisition, its token re-entries and their in-memory re-entries) report
// lockcore.ErrRevoked from Err at once; just after Revoke returns, Events
// is told that each of its entries ended with that cause, and then their
// contexts are cancelled with it. It returns lockcore.ErrNotHeld when nobody
// holds key, and an error matching lockcore.ErrInvalidReason for a reason
// that is empty, longer than 256 bytes, not UTF-8, or has control
// characters. Tests use it to play a lock lost while its handler runs.
func (e *Engine) Revoke(ctx context.Context, key lockcore.Key, reason string) (lockcore.Revocation, error) {
	if key == (lockcore.Key{}) {
		return lockcore.Revocation{}, fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey)
	}
	if err := operate.CheckReason(reason); err != nil {
		return lockcore.Revocation{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ks := e.keys[key]
	if ks == nil || len(ks.owners) == 0 {
		return lockcore.Revocation{}, lockcore.ErrNotHeld
	}
	r := lockcore.Revocation{
		Key:    key.String(),
		Owner:  operate.OwnerDigest(ks.owners[0].token),
		Reason: reason,
		At:     time.Now(),
	}
	for _, o := range ks.owners {
		r.Fence = max(r.Fence, o.fence)
	}
	if !e.defects.revokeNoBump {
		ks.counter++
	}
	r.NewFence = ks.counter
	ks.audit = slices.Insert(ks.audit, 0, r)
	if len(ks.audit) > auditKeep {
		ks.audit = ks.audit[:auditKeep]
	}
	e.lose(ks, lockcore.ErrRevoked)
	ks.owners = nil
	e.admit(ks)
	return r, nil
}

// CloseGate implements lockcore.Gatekeeper: from now on, for d (0: until
// opened), every fresh acquisition of key fails with ErrGateClosed, but a
// reader's and a restock's.
func (e *Engine) CloseGate(ctx context.Context, key lockcore.Key, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: a gate closed for %v", lockcore.ErrMisconfigured, d)
	}
	g := lockcore.Gate{Key: key, Since: time.Now()}
	if d > 0 {
		g.Until = g.Since.Add(d)
	}
	e.mu.Lock()
	if e.gates == nil {
		e.gates = make(map[lockcore.Key]lockcore.Gate)
	}
	e.gates[key] = g
	e.notify()
	e.mu.Unlock()
	return nil
}

// OpenGate implements lockcore.Gatekeeper.
func (e *Engine) OpenGate(ctx context.Context, key lockcore.Key) error {
	e.mu.Lock()
	delete(e.gates, key)
	e.notify()
	e.mu.Unlock()
	return nil
}

// GateOf implements lockcore.Gatekeeper.
func (e *Engine) GateOf(ctx context.Context, key lockcore.Key) (lockcore.Gate, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g, ok := e.gates[key]
	if ok && opened(g, time.Now()) {
		delete(e.gates, key)
		g, ok = lockcore.Gate{}, false
	}
	switch {
	case e.closed:
		return g, lockcore.ErrClosed // the gate still answers; the acquisition is refused as Take refuses it
	case !ok || e.defects.gateIgnored:
		return lockcore.Gate{}, nil
	}
	return g, fmt.Errorf("%w: %s", lockcore.ErrGateClosed, key)
}

// Gates implements lockcore.Gatekeeper: the closed gates, by key.
func (e *Engine) Gates(ctx context.Context) ([]lockcore.Gate, error) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]lockcore.Gate, 0, len(e.gates))
	for _, g := range e.gates {
		if !opened(g, now) {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out, nil
}

// Await blocks until cond reports true, asking it at once and again after
// every change of the engine (a hold taken, entered, released or revoked,
// a waiter queued or gone), or until ctx ends, whose error it then
// returns. cond may call the engine's methods (Inspect, say); it runs
// without the engine's lock. With Await a test waits for a state, such as
// a request queued behind a hold, without sleeping.
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

// defects are deliberate faults, each breaking one promise of
// lockcore.Engine or lockcore.Operator, so that this package's tests can
// show that Run catches an engine that has it. They are set only by those
// tests; the zero defects is a correct engine.
type defects struct {
	grantTwice     bool // a held key is granted once more, to another owner
	lifo           bool // the newest waiter is served first
	ignoreTokens   bool // a propagated owner token re-enters nothing
	tokenTakesFree bool // a free key is taken under a propagated token, not a fresh one
	silentLoss     bool // a revoked hold's leases are not told
	fenceReset     bool // a key's fencing counter restarts when it is freed
	keepWaiter     bool // a waiter that gave up stays in line, and is granted
	revokeNoBump   bool // Revoke does not move the fencing counter on
	waitIgnored    bool // every acquisition fails fast
	slotReused     bool // every permit gets slot 0
	writerJoins    bool // a waiter is admitted beside shared holders, exclusive or not
	readersPass    bool // a shared acquisition enters past queued waiters
	gateIgnored    bool // a closed gate refuses nothing
	keepTrim       bool // a result is stored up to its first line feed
	keepAgain      bool // a second Keep of a hold that kept stores its result again
	keepLost       bool // a hold that lost its key keeps its result all the same
	keepApart      bool // Keep releases, and stores only once the next holder has let go
	keepGrants     bool // Keep hands the key to the next waiter, wanting a result or not
	dropKept       bool // DropResult reports a result dropped, and keeps it
}

// opened reports whether gate g has opened by itself at now: its time is
// up.
func opened(g lockcore.Gate, now time.Time) bool { return !g.Until.IsZero() && !now.Before(g.Until) }
