package redisengine

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// watchdog renews every held lease of an Engine and declares lost those
// whose validity runs out. Its goroutine does no I/O: it sends renewals
// from goroutines of their own and never waits for them, so a renewal
// blocked in the client (go-redis, at its defaults, may take seconds and
// ignores context deadlines) cannot hold up the loss of a lease.
//
// Each hold's validity is tracked on the local monotonic clock: from the
// moment the call that confirmed it was sent, the confirmed lease length
// minus a tenth (the safety margin). Redis cannot expire the key before
// then. A hold is due for renewal a third of its lease after that moment;
// holds due within a twelfth of a TTL of each other are renewed together in
// one pipeline, so renewals run at about TTL/4 to TTL/3 (10,000 held
// leases at the default TTL cost about 2.5% of a core in the client and
// as much in Redis: BenchmarkManyLeases). A renewal that
// finds the hold gone or taken marks it lost. While renewals fail or go
// unanswered the hold is retried every TTL/10, and declared lost, with no
// I/O, the moment its validity runs out: before anyone else can take it.
type watchdog struct {
	l      *Engine
	mu     sync.Mutex
	holds  holdHeap // every live hold, by the time it is acted on next
	wakeAt time.Time
	tick   time.Duration // the longest the loop sleeps
	closed bool
	wake   chan struct{}
	done   chan struct{}
}

func margin(ttl time.Duration) time.Duration { return ttl / 10 }

func (w *watchdog) start(l *Engine) {
	w.l = l
	// A quarter of the shortest lease a hold can start with: a TTL, or a
	// grant by message that lasts until claimed.
	w.tick = min(l.opt.TTL, l.claimPX()) / 4
	w.wake = make(chan struct{}, 1)
	w.done = make(chan struct{})
	go w.run()
}

func (w *watchdog) stop() {
	<-w.done
}

// add schedules h, confirmed for length by a call sent at sent. It reports
// false when the watchdog has stopped.
func (w *watchdog) add(h *hold, sent time.Time, length time.Duration) bool {
	return w.addAll(sent, length, h)
}

// addAll schedules hs as add does h, all or none.
func (w *watchdog) addAll(sent time.Time, length time.Duration, hs ...*hold) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false
	}
	early := false
	for _, h := range hs {
		if h.grant != nil {
			// Handed over in memory: it runs on the validity it was handed
			// until its pass call lands (confirm), and is lost when that
			// runs out first.
			if h.inherit > h.valid.Load() {
				h.valid.Store(h.inherit)
			}
			if h.passed.Load() == passPending {
				h.at = h.validUntil()
			}
			h.step = h.ttl / 10
			heap.Push(&w.holds, h)
			early = early || h.at.Before(w.wakeAt)
			continue
		}
		h.setValidUntil(sent.Add(length - margin(length)))
		h.at = sent.Add(length / 3)
		h.step = min(h.ttl, length) / 10
		heap.Push(&w.holds, h)
		// Wake the loop only when it would otherwise act on this hold more
		// than a quarter of its lease late (the renewal then still has a
		// third of the lease before the validity ends, for three retries a
		// tenth apart): the loop never sleeps
		// longer than tick, so taking a lock, or being handed one, costs
		// no goroutine switch.
		early = early || h.at.Add(length/4).Before(w.wakeAt)
	}
	w.mu.Unlock()
	if early {
		w.poke()
	}
	return true
}

func (w *watchdog) remove(h *hold) {
	w.mu.Lock()
	if h.index >= 0 {
		heap.Remove(&w.holds, h.index)
	}
	w.mu.Unlock()
}

func (w *watchdog) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watchdog) run() {
	defer close(w.done)
	ctx := w.l.ctx
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w.mu.Lock()
		now := time.Now()
		due, ranOut := w.due(now)
		next := w.tick
		if len(w.holds) > 0 {
			next = min(w.holds[0].at.Sub(now), w.tick)
		}
		w.wakeAt = now.Add(next)
		w.mu.Unlock()

		for _, h := range ranOut {
			h.lose(errRanOut)
		}
		if len(due) > 0 {
			w.l.bg.do(func() { w.renew(ctx, due, now) })
		}
		timer.Reset(max(next, 0))
		select {
		case <-ctx.Done():
			w.shutdown()
			return
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// due drops the holds whose validity ran out by now, and returns them, to
// be declared lost once w.mu is unlocked, and those to renew: due by now,
// or within a twelfth of their TTL unless their validity ends first. Each
// gets its next time: a retry in TTL/10, or the end of its validity,
// whichever comes first. It runs under w.mu.
func (w *watchdog) due(now time.Time) (due, ranOut []*hold) {
	for len(w.holds) > 0 {
		h := w.holds[0]
		valid := h.validUntil()
		switch {
		case !h.live():
			heap.Pop(&w.holds)
			continue
		case !now.Before(valid):
			heap.Pop(&w.holds)
			ranOut = append(ranOut, h)
			continue
		case h.at.After(now.Add(h.step*10/12)) || h.at.After(now) && !h.at.Before(valid):
			return due, ranOut
		}
		due = append(due, h)
		h.at = minTime(now.Add(h.step), valid)
		heap.Fix(&w.holds, 0)
	}
	return due, ranOut
}

// renew sends one renewal for each of due, sent at sent, in a single
// pipeline, and records what came back. Nobody waits for it. Holds found
// gone or revoked are declared lost, and Options.Events told, once w.mu is
// unlocked.
func (w *watchdog) renew(ctx context.Context, due []*hold, sent time.Time) {
	deadline := sent.Add(time.Hour)
	for _, h := range due {
		deadline = minTime(deadline, h.validUntil())
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var (
		mu   sync.Mutex
		back bool // the renewals came back, answered or failed
	)
	if w.l.opt.Logger != nil {
		// A renewal not answered within Timeout is an outage, as an
		// acquisition's call is: the log hears of it then, well before
		// the lease runs out, however long the client waits.
		slow := time.AfterFunc(w.l.opt.Timeout, func() {
			mu.Lock()
			defer mu.Unlock()
			if !back {
				w.l.saw("renew", sent, errNoAnswer)
			}
		})
		defer slow.Stop()
	}
	cmds := w.send(rctx, due)
	mu.Lock()
	back = true
	mu.Unlock()
	lost := false
	var failed error // the first renewal that Redis did not answer
	w.mu.Lock()
	for i, h := range due {
		ok, cerr := cmds[i].(*redis.IntCmd).Result()
		switch {
		case cerr != nil:
			// Retried at h.at, or lost when its validity ends.
			if failed == nil {
				failed = cerr
			}
		case ok == 1:
			w.extend(h, sent)
		default:
			lost = true
			if h.index >= 0 {
				heap.Remove(&w.holds, h.index)
			}
		}
	}
	w.mu.Unlock()
	w.l.saw("renew", sent, failed)
	ev := w.l.opt.Events
	if ev == nil && !lost {
		return
	}
	for i, h := range due {
		ok, cerr := cmds[i].(*redis.IntCmd).Result()
		var err error
		switch {
		case cerr != nil:
			if ev == nil {
				continue
			}
			err = unavailable("renew", cerr)
		case ok == 1:
		case ok == 2:
			err = lockcore.ErrRevoked
		default:
			err = errGone
		}
		if err != nil && cerr == nil && !h.live() {
			continue // found gone because it was released meanwhile, or lost already
		}
		if ev != nil {
			ev.Renewed(h.key, err)
		}
		if err != nil && cerr == nil {
			h.lose(err)
		}
	}
}

// extend records that h's lease was confirmed for its TTL by a call sent
// at sent. It runs under w.mu.
func (w *watchdog) extend(h *hold, sent time.Time) {
	if v := sent.Add(h.ttl - margin(h.ttl)); v.After(h.validUntil()) && h.live() {
		h.setValidUntil(v)
		h.at = sent.Add(h.ttl / 3)
		h.step = h.ttl / 10
		if h.index >= 0 {
			heap.Fix(&w.holds, h.index)
		}
	}
}

// confirm records that h, handed over in memory, is its own in Redis, for
// its TTL from sent (its pass call): from then on it is renewed.
func (w *watchdog) confirm(h *hold, sent time.Time) {
	w.mu.Lock()
	if h.live() {
		if v := sent.Add(h.ttl - margin(h.ttl)); v.After(h.validUntil()) {
			h.setValidUntil(v)
		}
		h.at, h.step = sent.Add(h.ttl/3), h.ttl/10
		if h.index >= 0 {
			heap.Fix(&w.holds, h.index)
		}
	}
	w.mu.Unlock()
	w.poke()
}

// errGone is the cause of a hold that a renewal found gone or taken over.
var errGone = fmt.Errorf("%w: the key is gone or held by another owner", lockcore.ErrLockLost)

// renewNow makes the holds of attempt id, if any, due for renewal now. A
// revocation tells the Engine of each revoked entry, so that the hold
// learns it at once rather than at its next renewal.
func (w *watchdog) renewNow(id string) {
	found := false
	w.mu.Lock()
	now := time.Now()
	for _, h := range w.holds {
		if h.entry == id {
			h.at = now
			heap.Fix(&w.holds, h.index)
			found = true
			break
		}
	}
	w.mu.Unlock()
	if found {
		w.poke()
	}
}

// renewAll makes every hold due for renewal now: the master changed (see
// switches), and a renewal is how a hold learns whether the new one has it.
func (w *watchdog) renewAll() {
	w.mu.Lock()
	now := time.Now()
	for _, h := range w.holds {
		if h.grant == nil || h.passed.Load() != passPending {
			h.at = now
		}
	}
	heap.Init(&w.holds)
	w.mu.Unlock()
	w.poke()
}

// send renews hs in one pipeline and returns the answers, in order.
func (w *watchdog) send(ctx context.Context, hs []*hold) []redis.Cmder {
	cmds := make([]redis.Cmder, len(hs))
	for i, h := range hs {
		// The hold's key and entry, and the TTL, boxed once already.
		if h.shared {
			cmds[i] = w.l.run.cmd(ctx, sharedRenewScript, []any{nil, nil, 4, h.args[0], &h.keys[3], &h.keys[5], &h.keys[6], h.args[4], w.l.ttlArg(h.ttl)})
			continue
		}
		cmds[i] = w.l.run.cmd(ctx, renewScript, []any{nil, nil, 2, h.args[0], &h.keys[3], h.args[4], w.l.ttlArg(h.ttl)})
	}
	_ = w.l.run.run(ctx, cmds)
	return cmds
}

// shutdown loses every hold still scheduled: nobody renews them any more.
func (w *watchdog) shutdown() {
	w.mu.Lock()
	w.closed = true
	hs := w.holds
	w.holds = nil
	for _, h := range hs {
		h.index = -1
	}
	w.mu.Unlock()
	for _, h := range hs {
		h.lose(errLostClosed)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// holdHeap orders holds by the time the watchdog acts on them.
type holdHeap []*hold

func (q holdHeap) Len() int           { return len(q) }
func (q holdHeap) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q holdHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *holdHeap) Push(x any) {
	h := x.(*hold)
	h.index = len(*q)
	*q = append(*q, h)
}
func (q *holdHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.index = -1
	*q = old[:len(old)-1]
	return h
}
