package redisengine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier receives lock hand-overs for this Engine's waiters on one
// subscription connection. A release that hands a lock to a waiter publishes
// "<attempt id> <fencing token> <ms>" on the waiter's Engine channel; a
// revocation publishes "revoke <attempt id>" on the channel of the Engine
// whose attempt held the lock; a release that keeps a result publishes
// "nudge <lock's Redis key>", or "result <lock's Redis key>\n<result>"
// for a result of at most 4 KiB (lua/release.lua), on the channel of each
// Engine with a waiter queued.
type notifier struct {
	l       *Engine
	mu      sync.Mutex
	waiters map[string]*waiter
	// local: by Redis key, the waiters that a release of this Engine may
	// hand a hold to in memory, longest waiting first (see cohort.go).
	local  map[string][]*waiter
	ps     *redis.PubSub // the current subscription, for stop
	done   chan struct{}
	up     chan struct{} // closed when the subscription is first established
	upOnce sync.Once

	// probe: a PUBLISH through the command connections counts this
	// subscription when it is on the same server (not a Cluster), so a
	// count of 0 says it is not (see check).
	probe    bool
	checking atomic.Bool  // a check is on the wire
	checked  atomic.Int64 // when the last check was sent, unix ns
	live     atomic.Bool  // the subscription is established
	// liveCh is closed when the subscription is established, and replaced
	// by an open one when it is lost (guarded by mu).
	liveCh   chan struct{}
	current  *redis.PubSub                // the established one, for check to replace
	replaced atomic.Pointer[redis.PubSub] // the one check closed

	// sh, on a Cluster, receives the hand-overs (see shards); the
	// subscription above then receives revocations only.
	sh *shards
}

type waiter struct {
	id   string
	key  string     // the lock's Redis key
	slot int        // its Cluster slot, on a Cluster
	ch   chan int64 // the fencing token of a hand-over, 0: ask Redis again, or -1: res is its result
	// wants: the attempt wants the lock's stored result rather than the
	// lock (lockcore.Request.Result); res: the result a release kept, as
	// its message told it (set before -1 is sent on ch)
	wants bool
	res   []byte

	// Set with a hand-over, before its token is sent on ch: by a release of
	// this Engine, when its call was sent (the grant lasts the claim part
	// of ClaimWindow from then); by a message, how long the grant lasts.
	from time.Time
	px   time.Duration

	// local: the waiter is in notifier.local; parked: it sleeps on ch and
	// may be handed a hold in memory unless done, its caller's context's,
	// is closed (all guarded by notifier.mu); grant is set, before its
	// fencing token is sent on ch, when a hold is handed to it in memory.
	local  bool
	parked bool
	done   <-chan struct{}
	grant  atomic.Pointer[localGrant]
}

// healthInterval is how long the subscription may be silent before it is
// pinged, and how long a ping may go unanswered before it is replaced.
const healthInterval = 2 * time.Second

// start starts the receiver on ps, a subscription with no channels yet.
func (n *notifier) start(l *Engine, ps *redis.PubSub) {
	n.l = l
	n.waiters = make(map[string]*waiter)
	n.done = make(chan struct{})
	n.up = make(chan struct{})
	n.liveCh = make(chan struct{})
	n.ps = ps
	go n.run(l.channel, ps)
	if cc, ok := l.rdb.(*redis.ClusterClient); ok {
		n.sh = new(shards)
		n.sh.start(n, cc)
	}
}

// check makes sure, when it can (probe), that the subscription is on the
// server the commands go to, and replaces it at once when it is not: a
// failover client (Sentinel) keeps its subscription on the old master after
// a switch, where no hand-over reaches it. A waiter calls it when it found
// the lock its own after sleeping a whole recheck interval, as a missed
// hand-over leaves it. At most one check is on the wire, and one is sent
// per recheck interval at most.
func (n *notifier) check() {
	if !n.probe || !n.live.Load() || n.l.closed.Load() {
		return
	}
	now := time.Now().UnixNano()
	if now-n.checked.Load() < int64(n.l.recheck()) || !n.checking.CompareAndSwap(false, true) {
		return
	}
	n.checked.Store(now)
	n.l.bg.do(func() {
		defer n.checking.Store(false)
		ctx, cancel := context.WithTimeout(n.l.ctx, n.l.opt.Timeout)
		defer cancel()
		got, err := n.l.rdb.Publish(ctx, n.l.channel, "probe").Result()
		if err != nil || got > 0 {
			return
		}
		n.mu.Lock()
		ps := n.current
		n.mu.Unlock()
		if ps != nil && n.live.Load() {
			n.replaced.Store(ps) // its end is no outage
			_ = ps.Close()       // run subscribes again, through the client's dialer
		}
	})
}

func (n *notifier) stop() {
	n.mu.Lock()
	if n.ps != nil {
		_ = n.ps.Close()
	}
	n.mu.Unlock()
	<-n.done
	if n.sh != nil {
		<-n.sh.done
	}
}

// waiters are recycled: a wait that finds the lock free would otherwise
// allocate one and its channel for nothing.
var waiterPool = sync.Pool{New: func() any { return &waiter{ch: make(chan int64, 1)} }}

func (n *notifier) register(id, key string, wants bool) *waiter {
	w := waiterPool.Get().(*waiter)
	w.id, w.key, w.wants = id, key, wants
	if n.sh != nil {
		w.slot = slotOf(key)
		n.sh.want(w.slot)
	}
	n.mu.Lock()
	n.waiters[id] = w
	n.mu.Unlock()
	return w
}

// unregister removes w; after it no hand-over reaches w, so w can be reused.
func (n *notifier) unregister(w *waiter) {
	n.mu.Lock()
	if n.waiters[w.id] == w {
		delete(n.waiters, w.id)
	}
	n.dropLocal(w)
	n.mu.Unlock()
	if n.sh != nil {
		n.sh.unwant(w.slot)
	}
	select {
	case <-w.ch: // a hand-over that came after the wait ended
	default:
	}
	w.id, w.key, w.from, w.px, w.parked, w.done, w.wants, w.res = "", "", time.Time{}, 0, false, nil, false, nil
	w.grant.Store(nil)
	waiterPool.Put(w)
}

// deliver reads a hand-over message: "<attempt id> <fencing token> <ms>",
// the lock granted to the attempt for that many milliseconds; a
// revocation, "revoke <attempt id>": the attempt's hold is renewed at once,
// and the renewal's answer says whether it is still held; "nudge <lock's
// Redis key>": a result was kept for the lock, and its waiters ask again;
// or "result <lock's Redis key>\n<result>": the same, with a result small
// enough to send along, which the waiters that want it take from the
// message.
func (n *notifier) deliver(payload string) {
	if id, ok := strings.CutPrefix(payload, "revoke "); ok {
		n.l.wd.renewNow(id)
		return
	}
	if key, ok := strings.CutPrefix(payload, "nudge "); ok {
		n.nudge(key)
		return
	}
	if rest, ok := strings.CutPrefix(payload, "result "); ok {
		if key, res, ok := strings.Cut(rest, "\n"); ok {
			n.result(key, []byte(res))
		}
		return
	}
	id, rest, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	f, p, ok := strings.Cut(rest, " ")
	if !ok {
		return
	}
	fence, err1 := strconv.ParseInt(f, 10, 64)
	px, err2 := strconv.ParseInt(p, 10, 64)
	if err1 != nil || err2 != nil || fence <= 0 || px <= 0 {
		return
	}
	n.handOver(id, fence, time.Time{}, time.Duration(px)*time.Millisecond)
}

// handOver wakes the waiter of attempt id, which now holds its lock with
// the given fencing token: from a release of this Engine sent at from, or,
// by a message, for px. Each attempt gets at most one hand-over.
func (n *notifier) handOver(id string, fence int64, from time.Time, px time.Duration) {
	n.mu.Lock()
	if w := n.waiters[id]; w != nil {
		delete(n.waiters, id)
		n.dropLocal(w)
		select {
		case <-w.ch: // a nudge not yet read: the hand-over replaces it
		default:
		}
		w.from, w.px = from, px
		w.ch <- fence
	}
	n.mu.Unlock()
}

// nudge makes waiters ask Redis again: those on the lock at Redis key key,
// or every waiter when key is "". A waiter registers before its first call
// to Redis, so a nudge that comes during a call is read after it.
func (n *notifier) nudge(key string) {
	n.mu.Lock()
	for _, w := range n.waiters {
		if key == "" || w.key == key {
			select {
			case w.ch <- 0:
			default: // a nudge is pending already
			}
		}
	}
	n.mu.Unlock()
}

// result hands res, the result a release kept for the lock at Redis key
// key, to the waiters of that lock that want it, and makes the others ask
// Redis again. A waiter handed the result gets no hand-over after it.
func (n *notifier) result(key string, res []byte) {
	n.mu.Lock()
	for id, w := range n.waiters {
		if w.key != key {
			continue
		}
		if !w.wants {
			select {
			case w.ch <- 0:
			default:
			}
			continue
		}
		delete(n.waiters, id)
		n.dropLocal(w)
		select {
		case <-w.ch: // a nudge not yet read: the result replaces it
		default:
		}
		w.res = res
		w.ch <- -1
	}
	n.mu.Unlock()
}

// nudgeSlot makes the waiters on locks in a Cluster slot ask Redis again.
func (n *notifier) nudgeSlot(slot int) {
	n.mu.Lock()
	for _, w := range n.waiters {
		if w.slot == slot {
			select {
			case w.ch <- 0:
			default:
			}
		}
	}
	n.mu.Unlock()
}

// subscribed is called when the subscription is (re)established: hand-overs
// published while it was down were lost, so every waiter asks Redis again.
func (n *notifier) subscribed() { n.nudge("") }

// ping waits until the subscription has been established once, or ctx
// ends.
func (n *notifier) ping(ctx context.Context) error {
	select {
	case <-n.up:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no subscription to the notification channel: %w", ctx.Err())
	}
}

// whenLive returns a channel closed once the subscription is established:
// at once when it is.
func (n *notifier) whenLive() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.liveCh
}

// run keeps one subscription to channel alive until the Engine closes,
// replacing it when it fails or stops answering pings.
func (n *notifier) run(channel string, ps *redis.PubSub) {
	defer close(n.done)
	ctx := n.l.ctx
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		if ps == nil {
			ps = n.l.rdb.Subscribe(ctx) // no channels yet: does not dial
			n.mu.Lock()
			if ctx.Err() != nil {
				n.mu.Unlock()
				_ = ps.Close()
				return
			}
			n.ps = ps
			n.mu.Unlock()
		}
		if n.session(ctx, ps, channel) {
			backoff = 10 * time.Millisecond
		}
		n.live.Store(false)
		n.mu.Lock()
		n.current = nil
		select {
		case <-n.liveCh:
			n.liveCh = make(chan struct{})
		default:
		}
		n.mu.Unlock()
		_ = ps.Close()
		ps = nil
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, time.Second)
	}
}

// session serves one subscription until it fails; it reports whether the
// subscription was ever established. A subscription that drops, as when
// Redis restarts, or cannot be made, counts as a call of the Engine's that
// failed (see Engine.saw), so that the outage is logged even when no lock
// is taken. One established again does not say that Redis answers
// commands (go-redis dials subscriptions apart from its pool, which may
// still be refusing to dial for a while): the read of the gates that it
// starts (see gatesSubscribed) says so when it is answered.
func (n *notifier) session(ctx context.Context, ps *redis.PubSub, channel string) (ok bool) {
	gates := n.l.gatesChannel()
	sent := time.Now()
	if err := ps.Subscribe(ctx, channel, gates); err != nil {
		n.l.saw("notifications", sent, err)
		return false
	}
	pinged := false
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, healthInterval)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !pinged {
				pinged = true
				sent = time.Now()
				if err = ps.Ping(ctx); err == nil {
					continue
				}
			}
			if n.replaced.CompareAndSwap(ps, nil) {
				return ok
			}
			n.l.saw("notifications", sent, err)
			return ok
		}
		sent = time.Now()
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Channel == gates {
				n.l.gatesSubscribed()
				continue
			}
			ok = true
			n.mu.Lock()
			n.current = ps
			n.live.Store(true)
			select {
			case <-n.liveCh:
			default:
				close(n.liveCh)
			}
			n.mu.Unlock()
			n.upOnce.Do(func() { close(n.up) })
			n.subscribed()
		case *redis.Message:
			if m.Channel == gates {
				n.l.gateMessage(m.Payload)
				continue
			}
			n.deliver(m.Payload)
		}
	}
	return ok
}
