package redisengine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// Promises implements lockcore.Engine: the Redis engine makes every
// promise, FIFO with Options.LocalHandOvers hand-overs in memory in a row.
func (l *Engine) Promises() lockcore.Promises {
	return lockcore.Promises{FIFO: true, LocalHandOvers: l.opt.LocalHandOvers, OrderedFences: true, TokenReentry: true, Shared: true, Permits: true, Batch: true, Results: true}
}

// errOperatorOnly refuses an acquisition on an OperatorOnly Engine.
var errOperatorOnly = fmt.Errorf("%w: an OperatorOnly engine (redisengine.Options.OperatorOnly) takes no lock", lockcore.ErrMisconfigured)

// Take implements lockcore.Engine: it takes the lock on r.Key.
//
// When the hold in Redis is owned by one of r.Join (the tokens of the
// request's other locks, and those a propagated call brought), Take
// re-enters it by adding this attempt to the hold's entries. Otherwise it
// takes the lock, if free, for r.Token; or fails with
// a *lockcore.ContentionError matching ErrNotAcquired (fail fast) or, after
// waiting up to r.Wait, ErrWaitTimeout. A waiter is queued in Redis and
// woken when the lock is handed to it, in arrival order, except that a
// release may first hand it to a waiter of this Engine in memory
// (Options.LocalHandOvers). A waiter handed the lock in memory before ctx
// ended takes it, even if ctx ended before it woke: the lease's context
// is then done already.
//
// With r.Result, the same script call reads the key's stored result, if
// any (Results), and Take then takes nothing and fails with a
// *lockcore.ResultFound; a waiter finds the result when a release keeps
// it (Keep tells its Engine at once).
//
// A closed gate refuses it (ErrGateClosed) unless it is a reader's or a
// restock's: the Locker asks GateOf just before (r.GateChecked), from
// memory once the Engine has read the gates (one round trip, sent with
// the first acquisition), so that a new Engine refuses a closed resource
// from its first request; Take asks GateOf itself when the Locker did not
// (it does not know the gates of an Engine wrapped by one that is no
// Gatekeeper).
//
// Errors match lockcore's ErrInvalidKey, ErrNotAcquired, ErrUnavailable
// (and ErrRestartGuard, a *lockcore.RestartGuardError, while the restart
// guard refuses fresh holds), ErrMisconfigured (the server may evict held
// locks: see Check; r.TTL is longer than Options.MaxTTL; or the Engine is
// an Options.OperatorOnly engine) or
// ErrClosed; when ctx ends while waiting, the error also matches
// ctx.Err(). A call that Redis does not answer within Options.Timeout, or
// by ctx's deadline, fails with ErrUnavailable. On error nothing is held:
// an attempt whose call may have reached Redis is withdrawn (in the
// background when Redis is not answering).
func (l *Engine) Take(ctx context.Context, r lockcore.Request) (lockcore.Hold, error) {
	if l.closed.Load() {
		return nil, lockcore.ErrClosed
	}
	if l.opt.OperatorOnly {
		// It would take a lock without deciding the restart guard.
		return nil, errOperatorOnly
	}
	key := r.Key
	var read <-chan struct{} // the settings' first read, while it has not landed
	if !l.settled.Load() {
		read = l.settle(ctx)
	}
	if err := l.gated(ctx, r); err != nil {
		return nil, err
	}
	ttl := r.TTL
	if ttl == 0 {
		ttl = l.opt.TTL
	}
	if ttl > l.opt.MaxTTL {
		// The restart guard bounds every lease by MaxTTL.
		return nil, fmt.Errorf("%w: TTL %v is longer than redisengine.Options.MaxTTL %v, which the restart guard protects", lockcore.ErrMisconfigured, ttl, l.opt.MaxTTL)
	}
	if bad := l.refuse.Load(); bad != nil {
		return nil, l.report(*bad)
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(&lockcore.ContentionError{Key: key.String()}, err)
	}
	h := l.newHold(key, r.Token, ttl)
	h.share, h.slot = r.Share, -1
	h.setOrigin(r.Route, r.Trace)
	if len(r.Join) > 0 {
		h.others = strings.Join(r.Join, " ")
	}
	if r.Result && r.Share == 0 {
		// A waiter that wants a result must read it in Redis: it is
		// handed no hold in memory.
		h.result = l.resultKey(key)
	}
	h.passable = l.opt.LocalHandOvers > 0 && r.Share == 0 && h.others == "" && h.result == ""
	h.inSet = r.Set
	sent, length, err := l.acquire(ctx, h, max(r.Wait, 0))
	if errors.Is(err, errFound) {
		return nil, &lockcore.ResultFound{Result: h.found}
	}
	if err != nil {
		return nil, err
	}
	if h.grant == nil && late(sent, length) {
		// Answered after the lease it confirmed had run out, or with less
		// than a tenth of it left (a server or a client nearly as slow as
		// the TTL): Redis may have let the key go to another owner
		// already, or soon will, before a renewal lands. Given back, as a
		// call not answered in time is, before any lease or watchdog sees
		// it. (A hold handed
		// over in memory is the attempt's already, its releaser gone: it
		// runs, and is lost if its validity runs out first.)
		h.ended.Store(true)
		l.bg.do(func() { l.withdraw(h, "") })
		return nil, unavailable("acquire", errLate)
	}
	h.start = time.Now()
	if !l.wd.add(h, sent, length) {
		// Closed while acquiring: give it back, never handed out.
		h.lose(lockcore.ErrClosed)
		if h.grant != nil {
			l.giveBack(h.grant)
			l.bg.do(func() { l.withdraw(h, h.member) })
			return nil, lockcore.ErrClosed
		}
		l.withdraw(h, "")
		return nil, lockcore.ErrClosed
	}
	if h.grant != nil {
		if mono() >= h.inherit {
			// Taken after the validity it was handed ran out: lost before
			// its handler starts; its release says what the pass found.
			h.lose(errRanOut)
		}
		l.bg.do(func() { l.runPass(h) })
	}
	if read != nil {
		if err := l.firstLock(h, read); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func (l *Engine) newHold(key lockcore.Key, tok string, ttl time.Duration) *hold {
	h := &hold{l: l, key: key, keys: l.redisKeys(key), token: tok, ttl: ttl, index: -1, done: make(chan struct{})}
	h.args = [5]any{&h.keys[0], &h.keys[1], &h.keys[2], tok}
	h.guard, h.ch = &guardKey, &l.channel
	if l.cluster {
		h.guard = slotGuardKey(slotOf(h.keys[0])) // the guard of the lock's slot
	}
	if sh := l.nf.sh; sh != nil {
		h.ch = sh.channel(slotOf(h.keys[0]))
	}
	return h
}

var (
	// errNoAnswer: a call was sent and not answered within its deadline.
	errNoAnswer = errors.New("no answer from redis in time")
	// errUnsent: the caller stopped waiting before its call was sent.
	errUnsent = errors.New("call not sent in time")
	// errLate: a grant was answered with less than a tenth of the lease it
	// confirmed left (see late).
	errLate = errors.New("answered with less than a tenth of the lease it granted left")
	// errFound: an acquisition that wants a stored result found one
	// (hold.found), and took nothing.
	errFound = errors.New("a result is stored")
)

// What woke a waiting acquisition, as Events.Woken is told.
const (
	wokenByMessage = "message"
	wokenByReply   = "reply"
	wokenByTimer   = "timer"
	wokenByMemory  = "memory"
)

// acquire takes h's key in Redis for h.token as a new attempt, h.entry,
// and sets h.fence. It returns when and for how long the lease was
// confirmed: Redis keeps it at least length from sent.
func (l *Engine) acquire(ctx context.Context, h *hold, wait time.Duration) (time.Time, time.Duration, error) {
	now := time.Now()
	h.setEntry(l.nextID(now))
	if wait <= 0 {
		sent := now
		v, err := l.runAcquire(ctx, h, 0, "", sent)
		if errors.Is(err, lockcore.ErrUpgrade) || errors.Is(err, lockcore.ErrRestartGuard) || errors.Is(err, errFound) {
			return sent, 0, err // nothing taken, nothing queued
		}
		if err != nil {
			return sent, 0, l.acquireFailed(ctx, h, "", err)
		}
		if v <= 0 {
			return sent, 0, &lockcore.ContentionError{Key: h.key.String(), RetryAfter: l.stats.retryAfter(h.key, time.Duration(-v)*time.Millisecond)}
		}
		h.fence = v
		return sent, h.ttl, nil
	}

	deadline := now.Add(wait)
	var timeout error // what ran out at the deadline: the budget (nil) or ctx
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, timeout = d, context.DeadlineExceeded
	}
	// The member names this attempt in the key's wait queue. Its deadline is
	// on this host's wall clock; Redis drops it once its own clock passes it.
	member := strconv.FormatInt(deadline.UnixMilli(), 10) + " " + strconv.FormatInt(ms(h.ttl), 10) + " " +
		*h.ch + " " + h.entry + " " + h.token
	if h.share != 0 {
		member += " " + strconv.Itoa(h.share)
	}
	h.waitEnd = deadline
	w := l.nf.register(h.entry, h.keys[0], h.result != "")
	defer func() {
		if g := l.nf.leave(w); g != nil && h.grant != g {
			// Unreachable while holds go only to waiters asleep, which
			// take them: the hold goes back as its holder's release would.
			l.giveBack(g)
		}
	}()
	ev := l.opt.Events
	var queued bool // told Events the attempt waits
	var woke string // what woke the attempt, for Events
	if ev != nil {
		defer l.waited(h.key, &queued)
	}
	var timer *time.Timer // made when first needed: most acquisitions find the lock free
	var pttl int64
	polled := false // woken by the recheck interval, not by the holder's lease running out
	// On one server a hand-over published to nobody passes to the next
	// waiter (see grant_next), so an attempt does not queue while this
	// Engine's subscription is not established (a new Engine's, or one
	// being re-established): until then it only tries the lock (failing
	// fast, which takes a free lock even if others queue for it), and
	// sleeps until the subscription is up, the holder's lease would have
	// run out, or the recheck interval passed; it is not told to Events as
	// waiting meanwhile. Otherwise such a waiter would be reported queued
	// and lose its place to those who queued after it. (One queued before
	// the subscription dropped is parked behind the others, and takes its
	// place back with its next call: see grant_next.)
	early := l.trustArg == "1" && !l.nf.live.Load()
	local := false    // in the notifier's local queue
	var unlist func() // takes the attempt off the Engine's record's waiters
	for {
		if g := w.grant.Load(); g != nil {
			return l.tookLocal(h, w, g, member)
		}
		if woke != "" {
			ev.Woken(h.key, woke)
			woke = ""
		}
		sent := time.Now()
		left := deadline.Sub(sent)
		if left <= 0 {
			if early {
				return sent, 0, l.gaveUp(h, pttl, timeout) // never queued
			}
			return sent, 0, l.giveUp(h, member, pttl, timeout)
		}
		m, mw := member, ms(left)
		if early {
			m, mw = "", 0
		}
		// Not asleep: no hold is handed to it in memory during the call
		// (one not answered is withdrawn once it lands, which would drop
		// such a hold).
		v, err := l.runAcquire(ctx, h, mw, m, sent)
		if errors.Is(err, lockcore.ErrUpgrade) || errors.Is(err, errFound) {
			return sent, 0, err // nothing taken, no longer queued
		}
		var guard *lockcore.RestartGuardError
		if errors.As(err, &guard) {
			// Refused before anything was written. A wait that outlasts the
			// guard waits it out; another fails at once, with how long the
			// guard lasts, rather than as a busy lock after its wait.
			// (A restart that the guard follows emptied the queue; an
			// attempt queued before it is withdrawn all the same.)
			if guard.RetryAfter >= time.Until(deadline) {
				if unlist != nil {
					l.withdraw(h, member)
				}
				return sent, 0, err
			}
			if err := l.sleepOut(ctx, guard.RetryAfter); err != nil {
				if errors.Is(err, lockcore.ErrClosed) {
					return sent, 0, err
				}
				return sent, 0, l.giveUp(h, member, 0, err)
			}
			continue
		}
		if err != nil {
			return sent, 0, l.acquireFailed(ctx, h, m, err)
		}
		if early && v <= 0 {
			pttl = -v
			switch err := l.awaitSubscription(ctx, min(time.Duration(-v)*time.Millisecond+time.Millisecond, l.recheck(), time.Until(deadline))); {
			case errors.Is(err, lockcore.ErrClosed):
				return sent, 0, err
			case err != nil:
				return sent, 0, l.gaveUp(h, pttl, err)
			}
			early = !l.nf.live.Load()
			continue
		}
		if v > 0 {
			h.fence = v
			if polled {
				// Handed the lock while asleep, with no word of it: the
				// subscription may be on another server.
				l.nf.check()
			}
			return sent, h.ttl, nil
		}
		pttl = -v
		if h.passable && !local && !h.inSet {
			// Before Events hears it waits: in arrival order. (Not one
			// of a set: the set could give the hold back unseen.)
			l.nf.queueLocal(w)
			local = true
		}
		if ev != nil && !queued {
			queued = true
			ev.Waiting(h.key, +1)
		}
		if unlist == nil {
			unlist = l.waits(h)
			defer unlist()
		}
		// Sleep until handed the lock, or until the holder's lease would have
		// run out (the notification may be lost), or the deadline; and never
		// longer than half a claim window, in case a waiter ahead was granted
		// the lock and vanished.
		sleep := min(time.Duration(pttl)*time.Millisecond+time.Millisecond, l.recheck(), time.Until(deadline))
		if timer == nil {
			timer = time.NewTimer(sleep)
			defer timer.Stop()
		} else {
			timer.Reset(sleep)
		}
		polled = false
		if local {
			l.nf.park(w, ctx.Done())
		}
		select {
		case f := <-w.ch:
			if local {
				if g := l.nf.unpark(w); g != nil {
					return l.tookLocal(h, w, g, member)
				}
			}
			if f < 0 {
				// Told the result a release kept (it wants the result,
				// which came with the message): it leaves the queue in
				// the background, as one that gave up does.
				if ev != nil {
					ev.Woken(h.key, wokenByMessage)
				}
				h.found = w.res
				l.bg.do(func() { l.withdraw(h, member) })
				return sent, 0, errFound
			}
			if f <= 0 {
				// Nudged: the subscription was re-established, or a release
				// whose reply was lost may have handed the lock to this
				// attempt; the next call says.
				if ev != nil {
					woke = wokenByReply
				}
				continue
			}
			h.fence = f
			if l.run.ack > 0 || h.share != 0 || h.result != "" {
				// Handed the lock: claimed with a call of its own, which
				// the replicas must acknowledge (Options.Replicas), from
				// which a shared hold learns its slot, and which finds a
				// result kept meanwhile (by a hold that others re-entered,
				// released after it), when the attempt wants one: the
				// call then hands the lock on.
				if ev != nil {
					woke = wokenByMessage
					if !w.from.IsZero() {
						woke = wokenByReply
					}
				}
				continue
			}
			if !w.from.IsZero() {
				// Woken by a release of this Engine, which granted the lock
				// until claimed, as to any waiter, in a call sent at w.from:
				// the watchdog claims it for the whole TTL well before then.
				// Woken late in that grant (the release was slow to go
				// out), it claims the grant first, as one told by message
				// does: the next call finds it granted and extends it.
				if ev != nil {
					woke = wokenByReply
				}
				if length := min(l.claimPX(), h.ttl); time.Since(w.from) < length/2 {
					if ev != nil {
						ev.Woken(h.key, woke)
					}
					return w.from, length, nil
				}
				continue
			}
			// Told by message: the lock is this attempt's for w.px from a
			// moment after its last call was sent. With most of that left it
			// runs on it (the watchdog claims the lock soon); else it claims
			// the lock first: the next call finds it granted and extends it.
			if ev != nil {
				woke = wokenByMessage
			}
			if time.Since(sent) < w.px/2 {
				if ev != nil {
					ev.Woken(h.key, woke)
				}
				return sent, w.px, nil
			}
		case <-timer.C:
			if local {
				l.nf.unpark(w) // the loop's top takes a hold handed meanwhile
			}
			if ev != nil {
				woke = wokenByTimer
			}
			polled = sleep == l.recheck()
		case <-ctx.Done():
			if local {
				if g := l.nf.unpark(w); g != nil {
					// Handed the hold before the caller left: it is this
					// attempt's, and its pass call tells it of a
					// revocation that its releaser did not hear of.
					return l.tookLocal(h, w, g, member)
				}
			}
			return sent, 0, l.giveUp(h, member, pttl, ctx.Err())
		case <-l.ctx.Done():
			if local {
				if g := l.nf.unpark(w); g != nil {
					return l.tookLocal(h, w, g, member) // Acquire gives it back
				}
			}
			l.withdraw(h, member)
			return sent, 0, lockcore.ErrClosed
		}
	}
}

// tookLocal makes h, the attempt of waiter w queued as member, the
// successor of the hold g handed it in memory, and returns as acquire.
// (The hold is taken even if its validity ran out before the attempt
// woke: Acquire then loses it before handing out its lease, whose release
// says what the pass call found.)
func (l *Engine) tookLocal(h *hold, w *waiter, g *localGrant, member string) (time.Time, time.Duration, error) {
	if ev := l.opt.Events; ev != nil {
		ev.Woken(h.key, wokenByMemory)
	}
	w.grant.Store(nil) // taken: leave has nothing to hand back
	h.member = member
	h.take(g)
	return time.Time{}, 0, nil
}

// awaitSubscription waits up to d for this Engine's subscription to be
// established. It returns ctx's error when ctx ended first, and ErrClosed
// when the Engine closed.
func (l *Engine) awaitSubscription(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.nf.whenLive():
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.ctx.Done():
		return lockcore.ErrClosed
	}
	return nil
}

// sleepOut waits d, for the restart guard to end: ctx's error when ctx
// ends first, ErrClosed when the Engine closes.
func (l *Engine) sleepOut(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.ctx.Done():
		return lockcore.ErrClosed
	}
}

// waited tells Options.Events, which is set, that a wait ended, if the
// attempt was queued (*queued).
func (l *Engine) waited(key lockcore.Key, queued *bool) {
	if *queued {
		l.opt.Events.Waiting(key, -1)
	}
}

// runAcquire runs the acquire script for attempt h.entry, waiting up to
// wait ms (0: fail fast) in the queue as member, and waits for its answer
// until Options.Timeout after sent or ctx's deadline. It returns the fencing
// token (> 0) when h holds the lock, or minus the holder's remaining lease
// in ms (<= 0) when another owner does; errNoAnswer or errUnsent when
// Redis did not answer in time.
func (l *Engine) runAcquire(ctx context.Context, h *hold, wait int64, member string, sent time.Time) (int64, error) {
	s, n, k := acquireScript, 19, 0
	switch {
	case h.share != 0:
		s = sharedScript
	case h.others != "" || h.result != "":
		s = reenterScript // its reply may be an array
	}
	if h.result != "" {
		n, k = n+1, 1
	}
	if h.others != "" {
		n++
	}
	c, a := l.newCall(ctx, h, member, sent, sent.Add(l.opt.Timeout), n)
	// Six keys: the hold's three, the restart guard and the shared
	// entries' two; the result's, for an acquisition that wants it; then
	// the token.
	a[2], a[6], a[7], a[8] = 6+k, h.guard, &h.keys[5], &h.keys[6]
	if k == 1 {
		a[9] = &h.result
	}
	args := a
	a = a[k:] // the arguments, one place on after the result's key
	a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16] = h.args[3], l.ttlArg(h.ttl), l.retArg, wait, h.args[4], member, l.claimArg, l.trustArg
	a[17], a[18] = l.maxArg, shareArg(h.share)
	if h.others != "" {
		a[19] = h.others
	}
	if d, ok := ctx.Deadline(); ok && d.Before(c.deadline) {
		c.deadline = d
	}
	c.late = l.lateAcquire
	c.cmd = l.run.cmd(ctx, s, args)
	switch l.batch.do(ctx, c) {
	case answered:
		v, err := acquired(h, c.cmd)
		c.recycle()
		if gerr := l.guardError(err); gerr != nil {
			v, err = 0, gerr
		}
		if err == nil || errors.Is(err, lockcore.ErrRestartGuard) {
			l.answered()
		}
		return v, err
	case unsent:
		c.recycle()
		return 0, errUnsent
	}
	return 0, errNoAnswer
}

// acquired reads the reply of an acquire call for h: the fencing token or
// minus the holder's lease, as runAcquire returns them. When h re-entered a
// hold of another of the context's tokens, that token becomes h's.
func acquired(h *hold, cmd redis.Cmder) (int64, error) {
	if c, ok := cmd.(*redis.IntCmd); ok {
		return c.Result()
	}
	v, err := cmd.(*redis.Cmd).Result()
	if err != nil {
		return 0, err
	}
	switch v := v.(type) {
	case int64:
		return v, nil
	case []any:
		if len(v) == 2 && v[1] == "upgrade" {
			return 0, fmt.Errorf("%w: %s", lockcore.ErrUpgrade, h.key)
		}
		if len(v) == 3 && v[1] == "result" && h.result != "" {
			kv, _ := v[2].(string)
			_, res, ok := strings.Cut(kv, "\n")
			if !ok {
				return 0, fmt.Errorf("%w: the result of %s in Redis is not one this engine wrote", lockcore.ErrMisconfigured, resourceName(h.key))
			}
			h.found = []byte(res)
			return 0, errFound
		}
		var (
			f, slot int64 = 0, -1
			tok     string
			ok      bool
		)
		switch len(v) {
		case 2: // {fence, token}: a re-entry of another token's exclusive hold
			var ok1 bool
			f, ok = v[0].(int64)
			tok, ok1 = v[1].(string)
			ok = ok && ok1
		case 3, 4: // {fence, slot, token}: a shared hold; with 'x', an exclusive one it re-entered
			var ok1, ok2 bool
			f, ok = v[0].(int64)
			slot, ok1 = v[1].(int64)
			tok, ok2 = v[2].(string)
			ok = ok && ok1 && ok2 && h.share != 0
			h.shared, h.slot = len(v) == 3, int(slot)
		}
		if ok && f > 0 && (tok == h.token || slices.Contains(strings.Fields(h.others), tok)) {
			h.token, h.args[3] = tok, tok
			return f, nil
		}
	}
	return 0, fmt.Errorf("unexpected reply %v from the acquire script", v)
}

// shareArg returns a Policy's Share as a script argument.
func shareArg(share int) any {
	switch share {
	case 0:
		return shareNone
	case -1: // a reader
		return shareAll
	}
	return share
}

// The common Share arguments, boxed once.
var shareNone, shareAll any = 0, -1

// newCall returns a call for h (queued as member, if any), asked at
// sent and waited for until deadline, and its first n script arguments with
// the keys and the token in place; the caller fills in the rest.
func (l *Engine) newCall(ctx context.Context, h *hold, member string, sent, deadline time.Time, n int) (*call, []any) {
	c := newCall()
	c.ctx, c.h, c.member, c.sent, c.deadline = ctx, h, member, sent, deadline
	var a []any
	if n <= len(c.args) {
		a = c.args[:n]
	} else {
		a = make([]any, n)
	}
	a[2] = 3
	copy(a[3:7], h.args[:4])
	return c, a
}

// withdrawLate is the late hook of an acquire call: the caller gave up on
// it, so whatever it did in Redis is undone, unless it certainly did
// nothing (a fail-fast attempt that found the lock held, or never reached
// Redis; an attempt that found a stored result).
func (l *Engine) withdrawLate(c *call) {
	v, err := acquired(c.h, c.cmd)
	if errors.Is(err, errFound) {
		return // it found a result: took nothing, left the queue
	}
	if c.member == "" {
		if err == nil && v <= 0 || l.neverSent(err) || redis.HasErrorPrefix(err, "GUARD") {
			return
		}
	}
	h, member := c.h, c.member
	l.bg.do(func() { l.withdraw(h, member) })
}

// neverSent reports whether err, the error of a call, means that the call
// never reached Redis: a failure to dial, from a client that does not
// retry. A client that retries reports only its last try's error, and an
// earlier try may have run the call before its reply was lost.
func (l *Engine) neverSent(err error) bool {
	var op *net.OpError
	return l.noRetries && errors.As(err, &op) && op.Op == "dial"
}

// release runs the release script for h's entry: a plain release when
// member is empty, else the withdrawal of h's attempt, queued as member. It
// returns the number of entries left (0: released), -1 when the hold has no
// such entry, -3 when an operator revoked it, or -2 when the attempt was
// still queued. It waits for the
// answer up to Options.ReleaseTimeout; a release not answered by then goes
// on in the background.
//
// When the lock goes to a waiter of this Engine, Redis publishes nothing and
// the reply names the waiter, which is woken from it: one socket written
// and read instead of two. If the reply is lost, the lock may have gone to
// one of this Engine's waiters on the key without their knowing, so they
// ask Redis again.
func (l *Engine) release(ctx context.Context, h *hold, member string) (int64, error) {
	l.kept(h, member, time.Now())
	return l.send(ctx, h, member)
}

// send sends a release of h, or the withdrawal of member, as release does,
// and keeps nothing to send again.
func (l *Engine) send(ctx context.Context, h *hold, member string) (int64, error) {
	c := l.releaseCall(ctx, h, member, time.Now())
	if l.batch.do(context.Background(), c) != answered {
		return 0, errNoAnswer
	}
	n, err, woke := c.n, c.cmd.Err(), c.woke
	c.recycle()
	if err == nil {
		l.answered()
	}
	if woke {
		// The new holder runs before the rest of the old holder's work, as
		// sync.Mutex hands off in starvation mode.
		runtime.Gosched()
	}
	return n, err
}

// releaseCall returns the call of release, asked at sent.
func (l *Engine) releaseCall(ctx context.Context, h *hold, member string, sent time.Time) *call {
	c, a := l.newCall(ctx, h, member, sent, sent.Add(l.opt.ReleaseTimeout), 16)
	// Six keys: the hold's three, its revoked entries and the shared
	// entries' two, then the token.
	a[2], a[6], a[7], a[8], a[9] = 6, &h.keys[3], &h.keys[5], &h.keys[6], h.args[3]
	a[10], a[11], a[12], a[13], a[14], a[15] = h.args[4], l.retArg, member, h.ch, l.claimArg, l.trustArg
	c.keep, c.after = true, l.afterRelease
	c.cmd = l.run.cmd(ctx, releaseScript, a)
	return c
}

// released is the after hook of a release call: it reads the reply and
// wakes the waiter of this Engine that the lock went to, if any, whether or
// not the caller still waits.
func (l *Engine) released(c *call) {
	cmd := c.cmd.(*redis.Cmd)
	if cmd.Err() == nil {
		switch v := cmd.Val().(type) {
		case int64:
			c.n = v
			if v != -1 {
				return
			}
			// A run of this call that the client re-sent after a lost reply
			// may have handed the lock to a waiter here.
		case []any:
			if len(v) == 3 {
				to, ok1 := v[1].(string)
				f, ok2 := v[2].(int64)
				if ok1 && ok2 {
					l.nf.handOver(to, f, c.sent, 0)
					c.woke = true
					return
				}
			}
			cmd.SetErr(fmt.Errorf("unexpected release reply %v", v))
		}
	}
	l.nf.nudge(c.h.keys[0])
}

// giveUp withdraws a waiter whose wait ended; cause is the context's error,
// or nil when the wait budget ran out.
func (l *Engine) giveUp(h *hold, member string, pttl int64, cause error) error {
	l.withdraw(h, member)
	return l.gaveUp(h, pttl, cause)
}

// gaveUp is giveUp's error, for an attempt that holds nothing and is not
// queued.
func (l *Engine) gaveUp(h *hold, pttl int64, cause error) error {
	ce := &lockcore.ContentionError{Key: h.key.String(), RetryAfter: l.stats.retryAfter(h.key, time.Duration(max(pttl, 0))*time.Millisecond), TimedOut: true}
	if cause != nil {
		if errors.Is(cause, context.DeadlineExceeded) {
			return errors.Join(ce, cause)
		}
		ce.TimedOut = false
		return errors.Join(ce, cause)
	}
	return ce
}

// acquireFailed handles an acquire call that failed or was not answered in
// time. The attempt may hold the lock in Redis even though no reply came,
// so it is withdrawn, unless nothing reached Redis; a call still on the
// wire is withdrawn by its late hook once it lands. When the caller went
// away before its call was sent, Redis is answering and the withdrawal is
// done before returning: nothing is held. Otherwise it runs in the
// background, so that the caller gets its error at once.
//
// A caller that went away gets ErrNotAcquired with its context's error;
// otherwise, and when the caller's deadline passed while Redis did not
// answer, the error is ErrUnavailable: the lock state is unknown.
func (l *Engine) acquireFailed(ctx context.Context, h *hold, member string, err error) error {
	l.undo(ctx, h, member, err)
	return l.failed(ctx, h.key, err)
}

// undo withdraws h's attempt, queued as member, whose call failed with err,
// as acquireFailed says.
func (l *Engine) undo(ctx context.Context, h *hold, member string, err error) {
	switch {
	case errors.Is(err, errNoAnswer), member == "" && (errors.Is(err, errUnsent) || l.neverSent(err)):
	case errors.Is(ctx.Err(), context.Canceled) && errors.Is(err, errUnsent):
		l.withdraw(h, member)
	default:
		l.bg.do(func() { l.withdraw(h, member) })
	}
}

// failed returns the error of an acquisition of key whose call failed with
// err, as acquireFailed says.
func (l *Engine) failed(ctx context.Context, key lockcore.Key, err error) error {
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded // the call gave up at ctx's deadline, before ctx's own timer fired
	}
	if errors.Is(cerr, context.Canceled) {
		return errors.Join(&lockcore.ContentionError{Key: key.String()}, cerr)
	}
	if cerr != nil {
		return errors.Join(l.report(unavailable("acquire", err)), cerr)
	}
	return l.report(unavailable("acquire", err))
}

// withdraw withdraws h's attempt: it leaves the wait queue (as member, if
// any) and releases what it holds in Redis. A withdrawal Redis does not
// answer is sent again in the background (see retry) until the attempt
// could hold nothing any more: its place in the queue ends at its deadline,
// and a hold it took or was granted by then ends within its TTL.
func (l *Engine) withdraw(h *hold, member string) {
	if _, err := l.release(context.Background(), h, member); err != nil {
		until := time.Now()
		if member != "" && h.waitEnd.After(until) {
			until = h.waitEnd
		}
		l.retry(h, member, until.Add(h.ttl+margin(h.ttl)), nil)
	}
}
