package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/lockcore"
)

// Locker takes locks. It is what the HTTP middleware and the gRPC
// interceptors call, and all they know of a backend.
//
// # Adding an engine
//
// A new engine is a lockcore.Engine, which only takes holds and gives
// them back: Serve makes the Core that owns their leases (validation,
// re-entry in memory, owner tokens, the lease and its context, MaxHold,
// loss). The Redis engine (package redisengine) and the in-memory one
// (package locktest) are served so. A Locker may also wrap another, to
// observe or refuse its acquisitions, returning the leases the wrapped one
// made: it embeds the Locker it wraps (or its Core), and is one lock with
// it to a request.
//
// The engine's Promises declare what it promises beyond mutual
// exclusion; an engine that does not promise Shared or Permits refuses a
// Policy with such a Share (ErrMisconfigured).
//
// Errors match ErrInvalidKey (a zero Key), ErrMisconfigured (an invalid
// Policy), ErrNotAcquired (a
// *ContentionError: held by another owner, ErrWaitTimeout when a wait ran
// out), ErrUnavailable (the backend did not answer) or ErrClosed, and, when
// ctx ended while waiting, ctx.Err() too; on error nothing is held.
// Acquire is safe for concurrent use.
type Locker interface {
	Acquire(ctx context.Context, key lockcore.Key, p Policy) (*Lease, error)
	// core is the Core that owns the leases: a Core, or a type that
	// embeds one or another Locker (a wrapper).
	core() *Core
}

// ShareAll, as Policy.Share, lets any number of owners share the lock:
// readers, excluded only by an exclusive hold. An engine sees it as a
// Request.Share of -1.
const ShareAll = -1

// MaxSegments is the most segments a resource may be split into
// (Policy.Segments): SegmentKey numbers no more, nor lockcore.ParseKey.
const MaxSegments = 256

// defaultWait is the wait of a Policy whose Wait is 0.
const defaultWait = 5 * time.Second

// minTTL is the shortest lease a Policy may ask for.
const minTTL = 30 * time.Millisecond

// Policy says how to acquire one lock. Its zero value is the default: wait
// up to 5 seconds, a lease of the engine's default length, no ceiling on
// the hold. The same Policy
// travels unchanged from the option a route or gRPC method is given (in
// package lock, Wait, FailFast, TTL and MaxHold return one) through the HTTP
// middleware or gRPC interceptor to the engine's Acquire.
type Policy struct {
	// Wait is how long to wait for a lock held by another owner; the wait
	// also ends with the context given to Acquire. 0 means 5 seconds;
	// FailFast makes one attempt.
	Wait time.Duration
	// TTL is the lease length, which the engine renews while the lock is
	// held; it bounds how long the lock outlives a process that crashed
	// holding it. 0 means the engine's default (the Redis engine's is 10
	// seconds); at least 30ms.
	TTL time.Duration
	// Route names what the acquisition is for, for telemetry: the route
	// template or gRPC method whose request takes the lock, as the
	// adapters set it. Engines that are Operators show it beside the
	// holder or waiter it is for (Holder.Route, Waiter.Route). The gRPC
	// interceptors always set it; the HTTP middleware when a Locker
	// records routes (RecordsRoute: a lock.Locker with observers, such as
	// package lockotel's, which label their spans and metrics with it, or
	// on an engine that is an Operator), since finding a request's route
	// template costs an allocation.
	Route string
	// Trace is the trace id of the request that acquires (such as an
	// OpenTelemetry trace id in hex), "" for none. Engines that are
	// Operators show it, with Route, beside the holder or waiter it is
	// for (Holder.Trace, Waiter.Trace), so that an operator can follow a
	// stuck hold to its request. Package lock's Locker sets it from the
	// function given to its Trace option; at most 64 bytes are kept.
	Trace string
	// MaxHold, when positive, is the longest a hold may last however long
	// its handler runs: once it has been held that long, its context is
	// cancelled with a cause matching ErrMaxHold (and ErrLockLost) and it
	// is released in the backend, so that the next owner gets the lock
	// with a greater fencing token. 0: no ceiling, or the Locker's default
	// one (a route cannot lift a default ceiling, only shorten it). A
	// nested acquisition that re-enters the hold in memory shortens its
	// ceiling when its own ends sooner. The ceiling is per process: a hold
	// re-entered in another process by its propagated owner token is that
	// process's entry in the backend, under that process's ceiling, and
	// the lock goes to the next owner only when every entry is released.
	MaxHold time.Duration
	// Share makes the hold one of several owners' at once: 0 (the
	// default) is an exclusive hold; n > 0 lets up to n owners hold the
	// key at once (permits), each in a slot 0..n-1 that no other holder
	// of the key has at the same time (Lease.Slot); ShareAll lets any
	// number hold it (readers). An exclusive hold excludes every other
	// hold of the key, shared ones included, and a shared hold waits
	// while an exclusive one is held. Waiters are served in arrival
	// order: a shared acquisition does not pass a waiting exclusive one,
	// so that a stream of readers never starves a writer, and the shared
	// ones at the head of the line enter together. An acquisition counts
	// itself against its own n: with routes that name one key with
	// different n, each enters while fewer holders than its own n hold
	// (a rolling deployment that changes n goes through). Re-entry by
	// the same owner (in memory, or by a propagated token) joins the hold
	// it re-enters, exclusive or shared, and takes no slot of its own;
	// but a shared holder asking for the exclusive lock fails at once with
	// ErrUpgrade, as waiting for itself would never end.
	Share int
	// Segments, when positive, splits the resource into that many
	// segments, each an exclusive lock of its own (SegmentKey), so that
	// as many requests hold it at once, each in its own segment (such as
	// a part of a product's stock); on a Redis Cluster each segment has a
	// hash tag of its own, so they spread over the slots and masters. A
	// lock of the resource without Segments is another lock: it excludes
	// no segment's holder, nor they it. It is taken with
	// AcquireSegment, which picks a segment whose gate is open; an
	// engine's Acquire refuses it (ErrMisconfigured). At most MaxSegments;
	// not with Share.
	Segments int
	// Restock lets the acquisition through the resource's closed gate
	// (Gatekeeper), as a route that restocks a sold-out resource must
	// get through; its handler reopens the gate with OpenGate once the
	// stock is back. Readers (Share ShareAll) pass a closed gate without
	// it: they only look. Not with Segments: a restock locks the
	// resource itself.
	Restock bool

	// prepared is the Core this Policy was made ready for (Prepare): over
	// its defaults, valid, and promised by its engine, so that an
	// acquisition through it does not check it again.
	prepared *Core
}

// Or returns p with each of its zero fields taken from d: a route's policy
// over its Locker's defaults. The result is to be validated afresh.
func (p Policy) Or(d Policy) Policy {
	p.prepared = nil
	if p.Wait == 0 {
		p.Wait = d.Wait
	}
	if p.TTL == 0 {
		p.TTL = d.TTL
	}
	if p.MaxHold == 0 {
		p.MaxHold = d.MaxHold
	}
	if p.Route == "" {
		p.Route = d.Route
	}
	if p.Trace == "" {
		p.Trace = d.Trace
	}
	if p.Share == 0 {
		p.Share = d.Share
	}
	if p.Segments == 0 {
		p.Segments = d.Segments
	}
	p.Restock = p.Restock || d.Restock
	return p
}

// Validate returns an error matching ErrMisconfigured when p cannot be
// acquired with: a negative Wait other than FailFast, a TTL that is
// negative or below 30ms, a negative MaxHold, a Share below ShareAll,
// Segments negative, above MaxSegments or with a Share, or Restock with
// Segments.
func (p Policy) Validate() error {
	switch {
	case p.Wait < 0 && p.Wait != lockcore.FailFast:
		return fmt.Errorf("%w: wait %v is negative; use FailFast for no wait", lockcore.ErrMisconfigured, p.Wait)
	case p.TTL < 0 || p.TTL > 0 && p.TTL < minTTL:
		return fmt.Errorf("%w: TTL %v is below the minimum %v", lockcore.ErrMisconfigured, p.TTL, minTTL)
	case p.MaxHold < 0:
		return fmt.Errorf("%w: MaxHold %v is negative; 0 means no ceiling", lockcore.ErrMisconfigured, p.MaxHold)
	case p.Share < ShareAll:
		return fmt.Errorf("%w: Share %d is below ShareAll (-1)", lockcore.ErrMisconfigured, p.Share)
	case p.Segments < 0 || p.Segments > MaxSegments:
		return fmt.Errorf("%w: Segments %d, want 0 to %d", lockcore.ErrMisconfigured, p.Segments, MaxSegments)
	case p.Segments > 0 && p.Share != 0:
		return fmt.Errorf("%w: Segments %d with Share %d: a segment is an exclusive lock", lockcore.ErrMisconfigured, p.Segments, p.Share)
	case p.Segments > 0 && p.Restock:
		return fmt.Errorf("%w: Segments %d with Restock: a restock locks the resource itself, not a segment", lockcore.ErrMisconfigured, p.Segments)
	}
	return nil
}

// begin is the start of an engine's Acquire (see Locker). It returns an
// error matching ErrInvalidKey for a zero key and the error of
// p.Validate (unless p was prepared for e: Prepare); then a new lease on the live hold of key that engine e made
// and ctx descends from, if there is one (re-entry in memory, without a
// call to the backend); otherwise p with its default wait filled in, so
// that Wait is either positive or FailFast. A TTL of 0 is left for the
// engine to fill in with its own default.
func begin(ctx context.Context, e Locker, key lockcore.Key, p Policy) (*Lease, Policy, error) {
	if (key == lockcore.Key{}) {
		return nil, p, fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey)
	}
	if p.prepared != e.core() {
		if err := p.Validate(); err != nil {
			return nil, p, err
		}
	}
	if p.Segments != 0 {
		return nil, p, fmt.Errorf("%w: Segments %d: a segmented resource is taken with lifecycle.AcquireSegment, not an engine's Acquire", lockcore.ErrMisconfigured, p.Segments)
	}
	if ls := reenter(ctx, e, key); ls != nil {
		if ls.h.shared && p.Share == 0 {
			_ = ls.Release(context.WithoutCancel(ctx)) // an outer lease holds it still
			return nil, p, upgradeError(key)
		}
		if p.MaxHold > 0 {
			ls.h.limit(p.MaxHold) // the inner route's ceiling, when it ends sooner
		}
		return ls, p, nil
	}
	if p.Wait == 0 {
		p.Wait = defaultWait
	}
	return nil, p, nil
}

// monoBase anchors mono: time.Since reads the monotonic clock.
var monoBase = time.Now()

// mono returns the monotonic clock in nanoseconds since monoBase: a hold
// keeps its start in 8 bytes rather than a time.Time's 24.
func mono() int64 { return int64(time.Since(monoBase)) }

// hold states
const (
	holdLive int32 = iota
	holdReleased
	holdLost
)

// held is a hold as this process knows it, shared by the leases that
// re-entered it in memory. It is also the lease's context: the cancelable
// context it embeds, answering for ctxKey with the request's lock state.
// Because every other value, Done and Err come from the embedded context,
// the context package finds the cancelable parent of contexts derived
// from it, and derives them without a goroutine.
type held struct {
	context.Context // cancelled with the hold's end
	cancel          context.CancelCauseFunc

	e     *Core // that made the hold
	home  seat  // what the hold holds, until a move (see at)
	token string
	slot  int32 // the hold's slot among its key's shared holders; -1 for none
	// shared: the hold is one of several owners' (Policy.Share)
	shared bool
	// together: AcquireAll took the hold with others for one request, so
	// that it is not the request's one resource (see CloseGate)
	together bool
	// byToken: the hold re-entered, under a token the acquisition's
	// context carried (propagated from another process), a hold that token
	// has in the backend: a hold of this process's own, whose lease
	// reports Reentered
	byToken bool
	// set is what a segment's hold (taken by AcquireSegment) keeps so
	// that it can move to another segment (NextSegment); nil for any
	// other hold. Set before the lease
	// is handed out, and never changed: the hot path of every other hold
	// (Fence, Key, watch, certain, expose, free) pays one load of a nil
	// pointer for moves (see at).
	set   *movable
	refs  atomic.Int32 // outstanding leases; the backend release runs at 0
	state atomic.Int32
	why   atomic.Pointer[error] // the cause of the loss, once lost
	ev    lockcore.Events       // told of the hold's end; may be nil
	start int64                 // when the hold was made (mono); set only with ev
	st    ctxState              // what the context carries
	first Lease                 // the lease of the acquisition that made the hold

	// losing is held by lose from before its state change until its loss
	// was told and the context cancelled: a Release that found the hold
	// lost waits on it, so that it returns only once the loss was told.
	losing sync.Mutex

	// ceiling ends the hold at its MaxHold (limitHold, or a shorter one
	// of an in-memory re-entry: begin), if it has one; ceilingAt is when
	// (mono). Set under losing.
	ceiling   atomic.Pointer[time.Timer]
	ceilingAt int64
	freed     atomic.Bool // the release of the seat held last was called: it is called once
}

// seat is the backend's hold that a held holds: its Taken, of key, with
// fence. A move to another segment (NextSegment) puts the hold in another
// seat, as one whole, so that Key and Fence never mix two segments.
type seat struct {
	t     lockcore.Hold
	key   lockcore.Key
	fence int64
}

// movable is what a hold that may move to another segment keeps beside
// it (held.set).
type movable struct {
	// req is the Request the hold was taken with, so that a move asks
	// for the next segment's hold alike.
	req lockcore.Request
	// n: the hold is of a segment of a resource split into n
	// (AcquireSegment); 0 for none. until is when the request's wait for
	// a segment runs out (mono): the wait AcquireSegment began with, which
	// a move waits out the rest of; 0 for FailFast. Both set before the
	// lease is handed out (segmented).
	n     int
	until int64
	// moved is what the hold holds since a move to another segment: nil
	// until one. It is the one thing a move changes: the Taken, key and
	// fence, behind one atomic pointer, which only such holds have. Stored
	// under the hold's losing.
	moved atomic.Pointer[seat]
}

// at returns the seat the hold holds now: home, or the segment a move
// took it to. Lock-free: a hold that cannot move pays one load of a nil
// pointer, one that can an atomic load too.
func (h *held) at() *seat {
	if m := h.set; m != nil {
		if s := m.moved.Load(); s != nil {
			return s
		}
	}
	return &h.home
}

// limit makes the hold end at its ceiling of max from now, unless it has
// one already that ends sooner.
func (h *held) limit(max time.Duration) {
	at := mono() + int64(max)
	h.losing.Lock()
	defer h.losing.Unlock()
	if old := h.ceiling.Load(); old != nil {
		if h.ceilingAt <= at {
			return
		}
		old.Stop()
	}
	cause := fmt.Errorf("%w (MaxHold %v)", lockcore.ErrMaxHold, max)
	h.ceilingAt = at
	h.ceiling.Store(time.AfterFunc(max, func() {
		if h.lose(nil, cause) {
			_ = h.free(context.WithoutCancel(h))
		}
	}))
}

// free releases the hold in the backend, the first time it is called:
// the seat it holds then. A hold that may move (held.set) marks itself
// freed and reads its seat under losing, as a move swaps it, so that a
// move either comes before (and this releases the segment moved to) or
// is refused.
func (h *held) free(ctx context.Context) error {
	if h.set != nil {
		h.losing.Lock()
		ok := h.freed.CompareAndSwap(false, true)
		s := h.at()
		h.losing.Unlock()
		if !ok {
			return nil
		}
		return s.t.Release(ctx, h.early())
	}
	if !h.freed.CompareAndSwap(false, true) {
		return nil
	}
	return h.home.t.Release(ctx, h.early())
}

// early is Taken.Release's early: nil for a hold its holder released, or
// why it ended first.
func (h *held) early() error {
	if h.state.Load() == holdReleased {
		return nil
	}
	return h.lost()
}

// watch loses the hold when its Taken ends while it is live: a Taken the
// lease released, or one lost already, ends after it. Serve runs it in a
// goroutine of its own for each fresh hold. It follows a move: a Taken
// that ended and is no longer the hold's was released by the move
// (NextSegment), and it goes on with the seat moved to.
func (h *held) watch() {
	for {
		s := h.at()
		<-s.t.Done()
		if !h.live() {
			return
		}
		err := s.t.Err()
		if err == nil {
			err = lockcore.ErrLockLost // a backend that ended it without a word
		}
		if h.lose(s, err) || h.at() == s {
			return
		}
	}
}

// String describes the context as the context package does its own, with
// no token, key or other value of the lock: a handler may log its context.
func (h *held) String() string { return fmt.Sprint(h.Context) + ".WithLock" }

// Format prints String for every verb, %#v and %+v included, so that no
// field of the hold is ever printed.
func (h *held) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, h.String()) }

// Value answers for the lock state; other keys go to the parent.
func (h *held) Value(key any) any {
	if key == (ctxKey{}) {
		return &h.st
	}
	return h.Context.Value(key)
}

func (h *held) live() bool { return h.state.Load() == holdLive }

// expose tells h's hold that its token may leave the process (it reads
// Taken.Token), then reports whether h is certainly held: in that order,
// so that a release that finds the hold not exposed happened before this
// reads it live. Certainly held, not only live: a hold its backend lost a
// moment ago, whose lease Serve's watcher has yet to end, neither joins an
// acquisition nor leaves the process (its token may own a hold of the key
// again in the backend, with another fence: the attempt of an in-memory
// successor whose pass found the hold gone).
func (h *held) expose() bool {
	for {
		s := h.at()
		s.t.Token()
		ok := h.certain()
		if h.at() == s {
			return ok
		}
		// Moved meanwhile: the seat moved to is exposed too.
	}
}

// certain reports whether the hold is certainly held now: live, and its
// engine is sure of it. A hold the engine is no longer sure of is lost
// here and now.
func (h *held) certain() bool {
	for h.live() {
		s := h.at()
		err := s.t.Err()
		if err == nil {
			return true
		}
		if h.lose(s, err) || h.at() == s {
			return false
		}
		// s was released by a move meanwhile: ask the seat moved to.
	}
	return false
}

// retain adds a lease to a hold that is certainly held; it fails once the
// hold is released or lost.
func (h *held) retain() bool {
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

// lose marks the hold lost, tells Events.Ended of the loss and then
// cancels its context; it reports whether this call did it. A cause that
// does not match ErrLockLost is a hold given back before its lease was
// handed out: Events hears nothing of it. of is the seat whose Taken
// ended with cause, nil for a cause of the whole hold (its ceiling): a
// seat a move left is released by the move, and its end loses nothing.
func (h *held) lose(of *seat, cause error) bool {
	if !h.live() {
		return false
	}
	h.losing.Lock()
	defer h.losing.Unlock()
	if of != nil && h.at() != of {
		return false
	}
	if !h.state.CompareAndSwap(holdLive, holdLost) {
		return false
	}
	h.why.Store(&cause)
	if h.ev != nil && errors.Is(cause, lockcore.ErrLockLost) {
		// Before the context is cancelled: a handler that returns when
		// its context ends has not yet returned, and the request's span
		// is still open for what Events records on it. Ended is told once
		// per hold, at its end, of the key it holds then (the segment a
		// move took it to).
		h.ev.Ended(h, h.at().key, time.Duration(mono()-h.start), 0, cause, nil)
	}
	h.cancel(cause)
	return true
}

// settled returns once a loss of the hold, if one is under way, was told
// and its context cancelled.
func (h *held) settled() {
	h.losing.Lock()
	//lint:ignore SA2001 an empty critical section: waiting for lose is the point
	h.losing.Unlock()
}

// lost is the error a lost hold reports: the cause it was lost with (say
// ErrRevoked), also when the request's own context had ended before and
// so the context's cause is the parent's.
func (h *held) lost() error {
	if p := h.why.Load(); p != nil && errors.Is(*p, lockcore.ErrLockLost) {
		return *p
	}
	return lockcore.ErrLockLost
}

// lostOr returns the cause h was lost with, once its loss was told, when
// it was lost; else err. A loss ends the lease's context, and a call made
// with that context then fails for it: the loss is what the caller must
// hear, not the call's error.
func (h *held) lostOr(err error) error {
	if p := h.why.Load(); p != nil && errors.Is(*p, lockcore.ErrLockLost) {
		h.settled()
		return *p
	}
	return err
}

// newLease returns the lease of t, a fresh hold of key owned by token,
// which engine e (an Locker of Serve) has just taken for an acquisition
// with context ctx. The lease's context derives from ctx and carries the
// hold (HeldFrom, TokensFrom) and ctx's lock state; begin(ctx', e, key, p)
// re-enters it from any context derived from it. When token is one that
// ctx carries (TokensFrom: one propagated from another process, say), the
// hold is a re-entry of that token's hold in the backend, and the lease
// reports Reentered; a fresh acquisition's token comes from NewToken, and
// no context carries it yet.
//
// ev (nil for none) is told of the hold's end once, as Events.Ended
// describes: when it is lost (its Taken ends, or its Err fails), before
// its context is cancelled; or when the Release of its last lease returns
// from the backend release (Taken.Release).
func newLease(ctx context.Context, e *Core, key lockcore.Key, token string, t lockcore.Hold, ev lockcore.Events) *Lease {
	h := &held{e: e, home: seat{t: t, key: key, fence: t.Fence()}, token: token, ev: ev, slot: -1, byToken: carries(ctx, token)}
	if slot, ok := t.Shared(); ok {
		h.shared, h.slot = true, int32(max(slot, -1))
	}
	if ev != nil {
		h.start = mono()
	}
	h.Context, h.cancel = context.WithCancelCause(ctx)
	h.refs.Store(1)
	h.st = ctxState{token: token, held: h, parent: stateFrom(ctx)}
	h.first = Lease{h: h, ctx: h}
	return &h.first
}

// carries reports whether ctx carries tok: as the token of a lock it holds
// or of one given to Intake. Unlike TokensFrom, it exposes no hold.
func carries(ctx context.Context, tok string) bool {
	for s := stateFrom(ctx).first(); s != nil; s = s.next() {
		if s.token == tok {
			return true
		}
	}
	return false
}

// holds reports whether ctx descends from a live lease on key that engine
// e made: whether an acquisition of key would re-enter it in memory.
func holds(ctx context.Context, e Locker, key lockcore.Key) bool {
	for s := stateFrom(ctx).first(); s != nil; s = s.next() {
		if h := s.held; h != nil && h.at().key == key && sameBackend(h.e, e) && h.live() {
			return true
		}
	}
	return false
}

// reenter returns a new lease on the live hold of key that engine e made
// and ctx descends from, or nil when there is none: an acquisition by a
// context that already holds the lock re-enters it in memory, without a
// call to the backend. The hold is released in the backend when its last
// lease is.
func reenter(ctx context.Context, e Locker, key lockcore.Key) *Lease {
	for s := stateFrom(ctx).first(); s != nil; s = s.next() {
		if h := s.held; h != nil && h.at().key == key && sameBackend(h.e, e) && h.retain() {
			return &Lease{h: h, ctx: ctx}
		}
	}
	return nil
}

// limitHold gives the hold of ls, a lease newLease has just returned, a
// ceiling of max (a Policy's MaxHold; 0 for none): once it has been held
// that long and not released, it is lost with a cause matching ErrMaxHold
// (Events.Ended is told, then its context is cancelled) and released in
// the backend at once, while its leases may still be in use; their
// Release then returns that cause. An engine calls it right after
// newLease; it does nothing to a hold that has a ceiling already, so the
// adapters call it too, for engines that do not. The ceiling is this
// process's: a hold re-entered in another process by its propagated
// token has that process's own (see Policy.MaxHold).
func limitHold(ls *Lease, max time.Duration) {
	if max <= 0 || ls.inMemory() || ls.h.ceiling.Load() != nil {
		return // begin gives an in-memory re-entry's ceiling to its hold
	}
	ls.h.limit(max)
}

// Lease is a held lock. Its Context is cancelled, with cause ErrLockLost,
// if the lease is lost while held. Release it exactly once.
type Lease struct {
	h        *held
	ctx      context.Context
	released atomic.Bool
}

// Key returns the locked resource: for a segment's lease, the segment it
// holds now (NextSegment moves it).
func (ls *Lease) Key() lockcore.Key { return ls.h.at().key }

// Token returns the owner token that holds the lock. The token may then
// leave the process, and re-enter the lock from another one: an engine
// that hands holds over in memory no longer does with this one. Read it
// while the lock is held: once released, the hold may have been handed
// over in memory, and the token would re-enter the successor's hold until
// the engine's backend learns of the hand-over.
func (ls *Lease) Token() string {
	ls.h.expose()
	return ls.h.token
}

// Fence returns the fencing token of the hold: strictly greater than that of
// every earlier hold of the key. A re-entrant acquisition returns the fencing
// token of the hold it re-entered. (A hold an operator revoked can still
// be handed over in memory before the revocation reaches its engine: that
// successor's token lies below the revocation's NewFence, and it is told
// it was revoked; see Revocation.) For a segment's lease, the fencing
// token of the segment it holds now: NextSegment changes it.
func (ls *Lease) Fence() int64 { return ls.h.at().fence }

// Shared reports whether the hold is one of several owners' at once
// (Policy.Share): a reader's or a permit's.
func (ls *Lease) Shared() bool { return ls.h.shared }

// Slot returns the hold's slot among the key's permits: for a Policy with
// Share n > 0, a number 0..n-1 that no other holder of the key has while
// this hold lasts. It reports false for an exclusive hold and for a
// ShareAll one. A re-entry (in memory, or by a propagated token) has the
// slot of the hold it re-entered.
func (ls *Lease) Slot() (int, bool) { return int(ls.h.slot), ls.h.slot >= 0 }

// Reentered reports whether the lease re-entered a hold of its owner
// instead of taking the lock afresh: in memory, a hold that an outer lease
// of the same request made in this process (ReenteredInMemory), or in the
// backend, by an owner token the acquisition's context carried
// (propagated from another process: Intake). Either way its Fence is the
// re-entered hold's. A re-entry by token is still a hold of this
// process's own: it has its own renewals, ceiling (Policy.MaxHold) and
// Events.Ended, and the lock is free only once every process released
// its hold.
func (ls *Lease) Reentered() bool { return ls.inMemory() || ls.h.byToken }

// ReenteredInMemory reports whether the lease re-entered, in memory, a
// hold that an outer lease of the same request made in this process: the
// two share that hold, which ends (and Events.Ended hears of it) once,
// when the last of its leases is released. A re-entry by propagated token
// reports false: its hold is its own (see Reentered).
func (ls *Lease) ReenteredInMemory() bool { return ls.inMemory() }

// inMemory is ReenteredInMemory.
func (ls *Lease) inMemory() bool { return ls != &ls.h.first }

// Context returns a context derived from the one given to Acquire that
// carries the owner token and this hold (see HeldFrom) and
// is cancelled with cause ErrLockLost when the lease is lost, or with
// ErrReleased once the hold is released.
func (ls *Lease) Context() context.Context { return ls.ctx }

// Err returns nil while the lease is certainly held, ErrLockLost (possibly
// wrapped) once lost, and ErrReleased once released. It asks the engine,
// which judges by its own clock: a lease whose renewals have failed until
// its validity ran out is lost at once, even if the engine, delayed by the
// scheduler, has not yet cancelled the Context. Check it right before a
// write that the lock protects (and pass Fence along, for the store to
// check too).
func (ls *Lease) Err() error {
	h := ls.h
	if h.certain() {
		return nil
	}
	// The cause the hold ended with; not the parent's, when the request's
	// own context ended first.
	if err := context.Cause(h); errors.Is(err, lockcore.ErrLockLost) || errors.Is(err, lockcore.ErrReleased) || errors.Is(err, lockcore.ErrClosed) {
		return err
	}
	// Lost or released by another goroutine, which has yet to cancel the
	// context.
	if h.state.Load() == holdReleased {
		return lockcore.ErrReleased
	}
	return h.lost()
}

// Release gives up this lease. The hold is released in the backend when
// the last in-process lease on it is released (or at its MaxHold, before),
// even if ctx is cancelled;
// the engine bounds how long that keeps the caller waiting, and a release not confirmed by then goes
// on in the background. Releasing twice, or after a client re-sent the
// call, changes nothing more.
//
// It returns ErrReleased for a second call, an error matching ErrLockLost
// if the lease was lost before (its validity ran out, or the engine found
// it gone; ErrRevoked when an operator revoked it; ErrMaxHold when its
// hold reached its MaxHold), and an
// error matching ErrUnavailable if the backend did not answer in time; the
// key then expires at the end of its TTL unless the release lands later.
func (ls *Lease) Release(ctx context.Context) error {
	h, live, err := ls.let()
	if h == nil {
		return err
	}
	var began int64
	if live && h.ev != nil {
		began = mono()
	}
	return h.ended(ctx, live, began, h.free(ctx))
}

// let is Release up to the backend release: it returns the hold whose
// backend release is now due, and whether it was live (else lost); or a nil
// hold and what Release returns.
func (ls *Lease) let() (h *held, live bool, err error) {
	if !ls.released.CompareAndSwap(false, true) {
		return nil, false, lockcore.ErrReleased
	}
	h = ls.h
	if h.refs.Add(-1) > 0 {
		// An outer lease in this process still holds it; a hold lost
		// meanwhile is reported to every lease, not only the last.
		if h.certain() || h.state.Load() != holdLost {
			return nil, false, nil // or the other lease has just released it
		}
		h.settled()
		if err := context.Cause(h); errors.Is(err, lockcore.ErrLockLost) {
			return nil, false, err
		}
		return nil, false, h.lost()
	}
	h.certain() // a lease that ran out is lost, not released
	live = h.state.CompareAndSwap(holdLive, holdReleased)
	if t := h.ceiling.Load(); t != nil {
		t.Stop() // once it fires, it finds the hold released and does nothing
	}
	if live {
		h.cancel(lockcore.ErrReleased)
	}
	return h, live, nil
}

// ended is the end of Release, after the backend release of h (begun at
// began, when h has Events), which returned err.
func (h *held) ended(ctx context.Context, live bool, began int64, err error) error {
	if !live {
		h.settled() // the loss was told before this returns
		return h.lost()
	}
	if h.ev != nil {
		// Once per hold, of the key it held at its end (see lose).
		held, release := time.Duration(began-h.start), time.Duration(mono()-began)
		key := h.at().key
		if errors.Is(err, lockcore.ErrRevoked) {
			// Force-released before the release reached the backend.
			h.ev.Ended(ctx, key, held, release, err, nil)
		} else {
			h.ev.Ended(ctx, key, held, release, lockcore.ErrReleased, err)
		}
	}
	return err
}

// upgradeError is the error of an exclusive acquisition of key by a shared
// holder of it.
func upgradeError(key lockcore.Key) error {
	return fmt.Errorf("%w: %s", lockcore.ErrUpgrade, key)
}
