package redisengine

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// Hand-over in memory (Options.LocalHandOvers).
//
// A release whose hold may be handed over gives it to the longest waiting
// attempt of the same Engine for the same key, if any, without a call to
// Redis: the successor runs at once, on the released hold's validity, with
// the next of the fencing tokens that hold reserved. Its own call, the
// pass script, then makes the hold the successor's in Redis (its token,
// entry and fencing token, its lease) and takes its member off the queue;
// once that call is answered the successor's hold is an ordinary one,
// renewed by the watchdog. A successor may hand the hold on in memory
// before its own call was sent: it then sends none, and the first
// successor in the chain that still holds when the call before it settled
// sends one call for all of them, from the holder Redis has (a chain of
// sections shorter than a round trip costs one call, not one each). Until
// its call landed:
//   - the successor is not renewed, and is lost when the validity it
//     inherited runs out;
//   - its release waits for the call (at most Options.ReleaseTimeout);
//   - its token is not handed out (Token waits, at most Options.Timeout),
//     since Redis would not let another process re-enter by it;
//   - an operator's revocation names the released hold, which Redis still
//     has: the pass script finds it revoked, and the successor is told.
//
// A hold is handed only to a waiter asleep on its channel (notifier.park),
// not busy with a call of its own, whose caller has not left: the
// hand-over is then final, and the waiter takes the hold first thing when
// it wakes, even if its caller left meanwhile (it got the lock before
// then). So every hold a revocation names is either released through
// Redis, whose answer tells its holder, or taken by a successor whose
// pass call tells it. None goes to an attempt whose lease could go back
// unseen (lockcore.Request.Set), nor after Close; a hold that goes back anyway
// (giveBack) logs a revocation its release finds.
//
// The released hold's token never left the process (Token), so nobody can
// re-enter by it meanwhile.

// localGrant is a hold handed over in memory to a waiter.
type localGrant struct {
	prev   *hold // the released hold, which Redis has until the pass lands
	fence  int64
	passes int   // hand-overs in memory in a row, this one included
	valid  int64 // the released hold's validity, in mono ns
}

// Outcomes of a successor's pass call (hold.passed).
const (
	passPending int32 = iota
	passDone
	passGone
	passRevoked
	// passSkipped: the successor had handed the hold on in memory before
	// its call was sent, so it sent none; a later successor's names the
	// holder Redis has.
	passSkipped
)

// queueLocal lets w, a queued attempt that may be handed a hold in memory,
// be found by passTo, after the Engine's other waiters for its key.
func (n *notifier) queueLocal(w *waiter) {
	n.mu.Lock()
	if n.waiters[w.id] == w && !w.local {
		w.local = true
		if n.local == nil {
			n.local = make(map[string][]*waiter)
		}
		n.local[w.key] = append(n.local[w.key], w)
	}
	n.mu.Unlock()
}

// dropLocal removes w from n.local. It runs under n.mu.
func (n *notifier) dropLocal(w *waiter) {
	if !w.local {
		return
	}
	w.local, w.parked = false, false
	q := n.local[w.key]
	if i := slices.Index(q, w); i >= 0 {
		q = slices.Delete(q, i, i+1)
	}
	if len(q) == 0 {
		delete(n.local, w.key)
	} else {
		n.local[w.key] = q
	}
}

// park marks w, in n.local, as asleep on its channel until unpark, for
// a caller whose context ends with done: only then may passTo hand it a
// hold.
func (n *notifier) park(w *waiter, done <-chan struct{}) {
	n.mu.Lock()
	w.parked, w.done = w.local, done
	n.mu.Unlock()
}

// unpark ends w's sleep: no hold is handed to it until it parks again. It
// returns the hold handed to it meanwhile, if any, which w must take.
func (n *notifier) unpark(w *waiter) *localGrant {
	n.mu.Lock()
	w.parked = false
	n.mu.Unlock()
	return w.grant.Load()
}

// passTo hands g to the longest waiting attempt for the lock at Redis key
// key that may take a hold in memory, if it sleeps and its caller has not
// left, and reports whether it did: the attempt then takes it.
func (n *notifier) passTo(key string, g *localGrant) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.local[key]
	if len(q) == 0 || !q[0].parked {
		// One busy with a call of its own is woken by Redis instead, in
		// the queue's order.
		return false
	}
	w := q[0]
	select {
	case <-w.done:
		return false // its caller left: it will not run; Redis decides
	default:
	}
	g.prev.handedOn.Store(true)
	w.parked = false
	n.dropLocal(w)
	delete(n.waiters, w.id)
	select {
	case <-w.ch: // a nudge not yet read: the hand-over replaces it
	default:
	}
	w.grant.Store(g)
	w.ch <- g.fence
	return true
}

// leave unregisters w and returns the hold handed to it in memory and not
// taken, if any: after it, no hand-over reaches w.
func (n *notifier) leave(w *waiter) *localGrant {
	n.mu.Lock()
	n.dropLocal(w)
	g := w.grant.Swap(nil)
	n.mu.Unlock()
	n.unregister(w)
	return g
}

// take makes h, an attempt handed g, the successor of g's hold.
func (h *hold) take(g *localGrant) {
	h.fence, h.passes, h.grant, h.inherit = g.fence, g.passes, g, g.valid
	h.pending = make(chan struct{})
}

// giveBack releases g's hold in Redis, handed to an attempt that had gone
// or that could not run on it, as its holder's release would have: the
// hold Redis has, once the pass calls of the successors before settled,
// is that of the last of them whose call landed, or else the first
// holder's.
func (l *Engine) giveBack(g *localGrant) {
	l.bg.do(func() {
		p := g.prev
		// The successors in between whose pass did not land (skipped, or
		// failed) handed the hold on, so no release of theirs withdraws
		// them: their members may be queued still, and a pass that landed
		// late may have made one of them the holder.
		var unpassed []*hold
		for {
			if p.pending != nil {
				<-p.pending
			}
			if p.grant == nil || p.passed.Load() == passDone {
				break
			}
			unpassed = append(unpassed, p)
			p = p.grant.prev
		}
		// Withdrawn first: while p holds, a withdrawal grants nothing, and
		// p's release then goes to a live waiter, not to one of them.
		for _, q := range unpassed {
			l.withdraw(q, q.member)
		}
		n, err := l.release(context.Background(), p, "")
		if n == -3 && l.opt.Logger != nil {
			// Its holder released it already, and no successor ran on it.
			l.opt.Logger.Warn("routelock: a hold handed over in memory was found revoked as it went back, with nobody left to tell",
				append(p.origins(), "resource", resourceName(p.key), "fence", p.fence)...)
		}
		if err != nil {
			l.latch(p, l.report(unavailable("release", err)), nil)
		}
	})
}

// passedFrom returns the holder Redis has, once the pass calls of the
// successors before h settled (none of them lost: see runPass), and the
// waiter members of the successors in between, which sent none.
func (h *hold) passedFrom() (*hold, []string) {
	var members []string
	p := h.grant.prev
	for p.grant != nil && p.passed.Load() == passSkipped {
		members = append(members, p.member)
		p = p.grant.prev
	}
	return p, members
}

// passOn hands h, whose holder began to release it, to a waiter of this
// Engine in memory, if it may be and one waits; it reports whether it did.
func (h *hold) passOn(first bool) bool {
	l := h.l
	if !first || !h.passable || h.passes >= l.opt.LocalHandOvers || h.exposed.Load() || l.closed.Load() {
		return false
	}
	// Only a hold released by its holder, while certainly held: not one
	// lost, or released at its ceiling while its handler may still run.
	valid := h.valid.Load()
	if mono() >= valid {
		return false
	}
	return l.nf.passTo(h.keys[0], &localGrant{prev: h, fence: h.fence + 1, passes: h.passes + 1, valid: valid})
}

// Token implements lockcore.Hold: h's token may leave the process, so
// its release goes through Redis; a successor's waits until Redis has it.
func (h *hold) Token() string {
	h.exposed.Store(true)
	if h.pending != nil {
		h.settle(h.l.opt.Timeout)
	}
	return h.token
}

// settle waits up to d for h's pass call, and reports its outcome.
func (h *hold) settle(d time.Duration) int32 {
	select {
	case <-h.pending:
	default:
		t := time.NewTimer(d)
		select {
		case <-h.pending:
		case <-t.C:
		}
		t.Stop()
	}
	return h.passed.Load()
}

// runPass makes h, a successor, the holder in Redis: it sends the pass
// call, again every tenth of the lease while unanswered, until its
// validity runs out (the watchdog then declares it lost). An answer that
// says the hold is gone or revoked loses h.
func (l *Engine) runPass(h *hold) {
	defer close(h.pending)
	if prev := h.grant.prev; prev.pending != nil {
		// Handed over by a successor whose own pass is in flight: this
		// one names that successor, so it follows it.
		<-prev.pending
		switch prev.passed.Load() {
		case passDone, passSkipped:
		case passRevoked:
			h.passed.Store(passRevoked)
			h.lose(lockcore.ErrRevoked)
			return
		default:
			h.passed.Store(passGone)
			h.lose(errGone)
			return
		}
	}
	if h.handedOn.Load() {
		// Handed on already: the successor's call names the holder Redis
		// has, and takes this one's member off the queue too.
		h.passed.Store(passSkipped)
		return
	}
	from, skipped := h.passedFrom()
	every := max(h.ttl/10, time.Millisecond)
	for {
		sent := time.Now()
		n, err := l.pass(h, from, skipped, sent)
		switch {
		case err == nil && n == 1:
			h.passed.Store(passDone)
			l.wd.confirm(h, sent)
			return
		case err == nil && n == -3:
			h.passed.Store(passRevoked)
			h.lose(lockcore.ErrRevoked)
			return
		case err == nil:
			h.passed.Store(passGone)
			h.lose(errGone)
			return
		}
		// Retried while the validity lasts, even once the successor handed
		// the hold on: the next successor's call follows this one.
		if !time.Now().Add(every).Before(h.validUntil()) {
			h.passed.Store(passGone) // the watchdog loses it
			return
		}
		select {
		case <-l.ctx.Done():
			h.passed.Store(passGone)
			return
		case <-time.After(every):
		}
	}
}

// pass runs the pass script that makes h the holder in Redis in place of
// from, taking the members of the successors skipped in between off the
// queue, sent at sent; it waits for the answer up to Options.Timeout.
func (l *Engine) pass(h, from *hold, skipped []string, sent time.Time) (int64, error) {
	c, a := l.newCall(context.Background(), h, "", sent, sent.Add(l.opt.Timeout), 13+len(skipped))
	// Three keys: the hold, its queue and its revoked entries.
	a[2], a[3], a[4], a[5] = 3, &h.keys[0], &h.keys[1], &h.keys[3]
	a[6], a[7], a[8], a[9], a[10], a[11], a[12] = from.token, from.entry, h.token, h.entry, h.fence, l.ttlArg(h.ttl), h.member
	for i, m := range skipped {
		a[13+i] = m
	}
	c.keep = true
	c.cmd = l.run.cmd(c.ctx, passScript, a)
	switch l.batch.do(c.ctx, c) {
	case answered:
		n, err := c.cmd.(*redis.IntCmd).Result()
		c.recycle()
		if err == nil {
			l.answered()
		}
		return n, err
	case unsent:
		c.recycle()
		return 0, errUnsent
	}
	return 0, errNoAnswer
}
