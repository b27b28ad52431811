package redisengine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/lockcore"
)

// hold is one Redis-level hold of a key by a token: the lockcore.Hold
// that a lease is made of, and the watchdog's record of it.
type hold struct {
	l      *Engine
	key    lockcore.Key
	keys   [7]string // lock, queue, fence, revoked entries, audit, shared entries, shared fields
	args   [5]any    // the keys (as pointers into keys: no boxing), token and entry, for the scripts
	guard  *string   // the restart guard's key (see lua/guard.lua)
	ch     *string   // the channel of the Engine that hand-overs of the key to it go to
	token  string    // the owner token of the hold in Redis
	others string    // tokens that may re-enter a hold they own, for the acquire script
	// result: the result's Redis key, for an acquisition that takes a
	// stored result rather than the lock (lockcore.Request.Result); found:
	// the result it found
	result string
	found  []byte
	entry  string // the attempt id that holds the lock in Redis
	fence  int64
	ttl    time.Duration
	share  int    // the Policy's Share: 0 for an exclusive acquisition
	route  string // the Policy's Route, for the Engine's record and log lines (origin.go)
	trace  string // the Policy's Trace, at most maxTrace bytes, likewise
	// shared: the hold is a shared entry in Redis (a shared acquisition
	// that did not re-enter an exclusive hold); slot is its slot, or -1
	shared bool
	slot   int
	// waitEnd is the deadline of a waiting attempt, when its place in the
	// wait queue ends; zero for a fail-fast one.
	waitEnd time.Time
	start   time.Time   // when it was held, for holdStats
	ended   atomic.Bool // released or lost: the watchdog drops it
	// inSet: the acquisition is one of a set (lockcore.Request.Set), so
	// it is handed no hold in memory
	inSet bool
	// let: Release was called; why: the cause of the loss, set once, before
	// done is closed; done: closed once (ending), when the hold is lost or
	// released
	let    atomic.Bool
	why    atomic.Pointer[error]
	done   chan struct{}
	ending atomic.Bool

	// Hand-over in memory (see cohort.go). passable: the hold may be
	// handed over (Options.LocalHandOvers); passes: how many hand-overs in
	// memory in a row made it; exposed: its token may have left the
	// process; handedOn: it was released by a hand-over in memory. A
	// successor has grant, the hand-over, and member, its
	// waiter member; inherit is the validity it starts with (mono ns);
	// pending is closed once its pass call settled, with outcome passed.
	passable bool
	passes   int
	exposed  atomic.Bool
	handedOn atomic.Bool // released by handing it over in memory
	grant    *localGrant
	member   string
	inherit  int64
	pending  chan struct{}
	passed   atomic.Int32

	// Watchdog bookkeeping, guarded by the watchdog's mutex.
	index int           // in the watchdog heap; -1 when not scheduled
	at    time.Time     // when the watchdog acts on it next: renewal or loss
	step  time.Duration // how long after a renewal that failed the next is sent: a tenth of the lease last confirmed

	// valid is when the lease stops being certainly held, in monotonic
	// nanoseconds since monoBase. The watchdog sets it; Check reads it
	// without the watchdog's mutex.
	valid atomic.Int64
}

// monoBase anchors mono: time.Since reads the monotonic clock.
var monoBase = time.Now()

// mono returns the monotonic clock in nanoseconds since monoBase.
func mono() int64 { return int64(time.Since(monoBase)) }

// validUntil returns the local time until which the lease is certainly held.
func (h *hold) validUntil() time.Time { return monoBase.Add(time.Duration(h.valid.Load())) }

// late reports whether a lease confirmed for length by a call sent at sent
// is answered too late to be handed out: with less than a tenth of length
// of its validity left, the time the watchdog gives a renewal to land
// before it tries again (see watchdog.addAll). Handed out, it would likely
// be lost before its first renewal landed, its handler begun.
func late(sent time.Time, length time.Duration) bool {
	return !time.Now().Before(sent.Add(length - 2*margin(length)))
}

// setValidUntil sets the local time until which the lease is certainly held.
func (h *hold) setValidUntil(t time.Time) { h.valid.Store(int64(t.Sub(monoBase))) }

// errRanOut is the cause of a lease whose renewals failed until it ran out:
// it matches ErrUnavailable too, so that telemetry and logs tell a lock
// lost to an outage from one found gone.
var errRanOut error = &both{"routelock: lease lost: renewals failed until the lease ran out (lock service unavailable)", [2]error{lockcore.ErrLockLost, lockcore.ErrUnavailable}}

// errLostClosed is the cause of a lease lost because its Engine was
// closed: it matches ErrLockLost and ErrClosed.
var errLostClosed error = &both{"routelock: lease lost: locker closed", [2]error{lockcore.ErrLockLost, lockcore.ErrClosed}}

// both is an error that matches two sentinels and reads as msg, which
// says both with the module's prefix once.
type both struct {
	msg  string
	errs [2]error
}

func (b *both) Error() string   { return b.msg }
func (b *both) Unwrap() []error { return b.errs[:] }

// live reports whether the hold is neither released nor lost.
func (h *hold) live() bool { return !h.ended.Load() }

// Fence implements lockcore.Hold.
func (h *hold) Fence() int64 { return h.fence }

// Shared implements lockcore.Hold.
func (h *hold) Shared() (int, bool) { return h.slot, h.shared }

// Done implements lockcore.Hold: closed when the hold is lost or
// released.
func (h *hold) Done() <-chan struct{} { return h.done }

// end closes Done, once.
func (h *hold) end() {
	if h.ending.CompareAndSwap(false, true) {
		close(h.done)
	}
}

// Err implements lockcore.Hold: nil while the local validity lasts. A
// hold that fails it is lost, so the watchdog stops renewing it.
func (h *hold) Err() error {
	if p := h.why.Load(); p != nil {
		return *p
	}
	if mono() < h.valid.Load() {
		return nil
	}
	h.lose(errRanOut)
	if p := h.why.Load(); p != nil {
		return *p // lost with another cause meanwhile, or released
	}
	return errRanOut
}

// lose ends the hold as lost with cause and closes Done, so that lockcore
// ends its lease; it reports whether this call did it. A hold released
// already, or given back before its lease was made (a cause that does not
// match ErrLockLost, or ErrClosed), is lost without a word in the log.
func (h *hold) lose(cause error) bool {
	h.ended.Store(true)
	if h.let.Load() || !h.why.CompareAndSwap(nil, &cause) {
		return false
	}
	h.end()
	if lg := h.l.opt.Logger; lg != nil && errors.Is(cause, lockcore.ErrLockLost) && !errors.Is(cause, lockcore.ErrClosed) {
		lg.Warn("routelock: a lease was lost while its holder ran", append(h.origins(), "resource", resourceName(h.key), "cause", cause)...)
	}
	return true
}

// origins returns the log attributes of the route and trace id that h was
// acquired with, those it has.
func (h *hold) origins() []any {
	var a []any
	if h.route != "" {
		a = append(a, "route", h.route)
	}
	if h.trace != "" {
		a = append(a, "trace", h.trace)
	}
	return a
}

// setEntry makes id the hold's entry in Redis.
func (h *hold) setEntry(id string) {
	h.entry = id
	h.args[4] = id
}

// Release implements lockcore.Hold. Its entry in Redis is dropped, and when
// none is left the key goes to the next waiter or is deleted. The call runs
// detached from ctx's cancellation and waits for Redis at most
// Options.ReleaseTimeout; a release not answered by then goes on in the
// background.
//
// It returns lockcore.ErrRevoked when an operator revoked the hold
// (Revoke) before the release reached Redis: lockcore then tells
// Options.Events of a loss with that cause.
//
// With Options.LocalHandOvers it may instead hand the hold to a waiter of
// the same Engine in memory, and return at once (see cohort.go), even
// while Redis does not have it yet. Otherwise a hold handed over in memory
// is released once Redis has it (its pass call), waiting for that at most
// Options.ReleaseTimeout.
func (h *hold) Release(ctx context.Context, early error) error {
	first := h.letGo()
	if early == nil && h.passOn(first) {
		// The successor runs before the rest of this holder's work, as
		// sync.Mutex hands off in starvation mode.
		runtime.Gosched()
		return nil
	}
	if h.pending != nil {
		switch h.settle(h.l.opt.ReleaseTimeout) {
		case passPending:
			// Redis is not answering: released once the pass settles.
			h.l.bg.do(func() {
				<-h.pending
				_ = h.releaseUnpassed()
			})
			return h.l.report(unavailable("release", errNoAnswer))
		case passGone, passRevoked:
			return h.releaseUnpassed()
		}
	}
	n, err := h.l.release(ctx, h, "")
	return h.released(n, err)
}

// releaseUnpassed releases h, a successor whose pass did not land: the
// hold it was handed is still its predecessor's in Redis, if it is
// anybody's.
func (h *hold) releaseUnpassed() error {
	if h.passed.Load() == passDone {
		_, err := h.l.release(context.Background(), h, "")
		return err
	}
	h.l.giveBack(h.grant)
	// Its own attempt too: its member may still be queued, and an acquire
	// call of its own may have taken the lock meanwhile, if the hold it
	// was handed was gone.
	h.l.bg.do(func() { h.l.withdraw(h, h.member) })
	if h.passed.Load() == passRevoked {
		return lockcore.ErrRevoked
	}
	return nil
}

// letGo is the start of h's release: the watchdog drops it. It reports
// whether h was live until then.
func (h *hold) letGo() bool {
	h.let.Store(true)
	h.end()
	first := !h.ended.Swap(true)
	if first {
		h.l.stats.record(h.key, time.Since(h.start))
	}
	h.l.wd.remove(h)
	return first
}

// released is the end of h's release, whose call replied n or failed with
// err: Release's error.
func (h *hold) released(n int64, err error) error {
	// A reply of -1 while the lease was valid means Redis no longer has this
	// entry although nobody else could have taken the lock: a run of this
	// same call, re-sent by the client after a lost reply, released it.
	switch {
	case err != nil:
		err = h.l.report(unavailable("release", err))
		h.l.latch(h, err, nil)
	case n == -3:
		err = lockcore.ErrRevoked
	}
	return err
}

// latch keeps releasing h in the background after its release failed with
// err, so that the key is freed soon after Redis is back instead of when
// its lease runs out: every retry interval until the lease would have
// expired anyway. A release that ran before changes nothing more. With
// again (not nil), the call retried is again's instead of a release: the
// call that failed, such as a Keep's, which releases h too.
func (l *Engine) latch(h *hold, err error, again func() error) {
	if f := l.opt.OnReleaseError; f != nil {
		f(h.key, err)
	}
	if lg := l.opt.Logger; lg != nil {
		lg.Warn("routelock: a release failed; retrying in the background until the lease would have expired",
			append(h.origins(), "resource", resourceName(h.key), "err", err)...)
	}
	l.retry(h, "", time.Now().Add(h.ttl+margin(h.ttl)), again)
}

// retry sends h's release again in the background, or with member the
// withdrawal of its attempt, or with again (not nil) that call instead,
// every retry interval (a tenth of the lease, at most a second) until
// Redis answers or until passes, after which the entry can hold nothing
// in Redis. Each run is idempotent: one that ran before changes nothing
// more.
func (l *Engine) retry(h *hold, member string, until time.Time, again func() error) {
	if again == nil {
		again = func() error {
			_, err := l.release(context.Background(), h, member)
			return err
		}
	}
	every := min(h.ttl/10, time.Second)
	l.bg.do(func() {
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-l.ctx.Done():
				return
			case <-t.C:
			}
			if err := again(); err == nil || !time.Now().Add(every).Before(until) {
				return
			}
			t.Reset(every)
		}
	})
}

// unavailable wraps err, an error of a call to Redis, in ErrUnavailable,
// or in ErrMisconfigured when Redis said the client is set up wrongly.
func unavailable(op string, err error) error {
	if errors.Is(err, lockcore.ErrMisconfigured) {
		// Says so already: op goes after the sentinel's text, once.
		rest := strings.TrimPrefix(err.Error(), lockcore.ErrMisconfigured.Error()+": ")
		return &both{lockcore.ErrMisconfigured.Error() + ": " + op + ": " + rest, [2]error{lockcore.ErrMisconfigured, err}}
	}
	if misconfigured(err) {
		return fmt.Errorf("%w: %s: %w", lockcore.ErrMisconfigured, op, err)
	}
	return fmt.Errorf("%w: %s: %w", lockcore.ErrUnavailable, op, err)
}
