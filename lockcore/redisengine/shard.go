package redisengine

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// shards receives hand-overs on a Redis Cluster, where PUBLISH reaches
// every node: a waiter of the Engine names, in its queue entry, the
// Engine's shard channel of the lock's slot ("<prefix>notify:<id>{<tag>}",
// see slotTag), on which a release or expiry in that slot hands the lock
// over with SPUBLISH, a message on the slot's shard only. The Engine
// subscribes to the shard channel of every slot it waits in, on one
// connection per master, while waiters wait there and for a while after
// the last one left (linger), and follows a slot that moves (the server
// ends the subscription with SUNSUBSCRIBE, or answers MOVED or ASK) or
// whose master fails (the connection breaks): it subscribes again on the
// slot's master as the client then knows it. A waiter on a slot whose
// subscription is not yet confirmed may miss its hand-over; when the
// subscription is confirmed, the slot's waiters ask Redis again, and until
// then they ask at every recheck interval.
//
// A SPUBLISH that reaches no subscriber on the lock's master (the Engine's
// subscription is not yet in place, or is on a replica, or the server has
// no sharded pub/sub) is followed by a PUBLISH on the Engine's own channel,
// which the Engine always subscribes to. A server that refuses SSUBSCRIBE
// (unknown to servers before Redis 7.0 and to miniredis, or denied by an
// ACL) makes the Engine stop subscribing to shard channels, and say so in
// its log.
//
// Revocations still go out with PUBLISH on the Engine's own channel (see
// notifier): they are rare, and sent to the holder, which waits in no
// queue.
type shards struct {
	n     *notifier
	cc    *redis.ClusterClient
	chans []atomic.Pointer[string] // by slot, made on first use: the Engine's shard channel
	kick  chan struct{}            // wakes run
	done  chan struct{}            // closed when run returns
	off   atomic.Bool              // the server has no sharded pub/sub: hand-overs come on the Engine's own channel

	mu    sync.Mutex
	slots map[int]*slotSub
	nodes map[string]*nodeSub // by the address of the master
}

// slotSub is the Engine's subscription to its shard channel of one slot.
type slotSub struct {
	waiters int       // registered waiters in the slot
	idle    time.Time // when waiters last fell to 0
	node    *nodeSub  // the connection subscribed, or subscribing; nil when none
	ready   bool      // the subscription on node is confirmed
	retry   time.Time // when run may subscribe again after a failure
	backoff time.Duration

	// avoid is the node that last ended or refused the subscription, which
	// no longer serves the slot as its master, until avoidUntil: the
	// client may not know that yet (a replica takes shard subscriptions
	// too, and hears the messages, but is not where the slot's publishers
	// are, and may be gone next).
	avoid      string
	avoidUntil time.Time
}

// nodeSub is one subscription connection, to the master at addr (as the
// client knew it when the connection was made).
type nodeSub struct {
	addr  string
	ps    *redis.PubSub
	slots map[int]bool // the slots it is subscribed to, or subscribing
	todo  []string     // shard channels to subscribe to ("+" prefix: to unsubscribe from)
	unsub map[int]int  // by slot: unsubscriptions sent whose replies are not read yet
	wake  chan struct{}
	gone  chan struct{} // closed when dropped
	read  bool          // its reader runs
}

// linger is how long a slot's subscription outlives its last waiter, so
// that a lock contended again and again is not subscribed to anew each
// time.
const linger = 30 * time.Second

// avoidFor is how long a slot's subscription avoids the node that ended it
// while the client still names that node the slot's master.
const avoidFor = 10 * time.Second

func (s *shards) start(n *notifier, cc *redis.ClusterClient) {
	s.n, s.cc = n, cc
	s.chans = make([]atomic.Pointer[string], slots)
	s.kick = make(chan struct{}, 1)
	s.done = make(chan struct{})
	s.slots = make(map[int]*slotSub)
	s.nodes = make(map[string]*nodeSub)
	go s.run()
}

// channel returns the Engine's shard channel of slot.
func (s *shards) channel(slot int) *string {
	if c := s.chans[slot].Load(); c != nil {
		return c
	}
	c := s.n.l.channel + "{" + slotTag(slot) + "}"
	s.chans[slot].Store(&c)
	return &c
}

// want records a waiter in slot, and has the slot subscribed to if it is
// not.
func (s *shards) want(slot int) {
	if s.off.Load() {
		return
	}
	s.mu.Lock()
	ss := s.slots[slot]
	if ss == nil {
		ss = &slotSub{backoff: 10 * time.Millisecond}
		s.slots[slot] = ss
	}
	ss.waiters++
	kick := ss.node == nil
	s.mu.Unlock()
	if kick {
		s.wake()
	}
}

// unwant records that a waiter in slot left.
func (s *shards) unwant(slot int) {
	if s.off.Load() {
		return
	}
	s.mu.Lock()
	if ss := s.slots[slot]; ss != nil {
		if ss.waiters--; ss.waiters == 0 {
			ss.idle = time.Now()
		}
	}
	s.mu.Unlock()
}

func (s *shards) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run subscribes the slots that need it, drops those idle longer than
// linger, and closes every connection when the Engine closes.
func (s *shards) run() {
	defer close(s.done)
	ctx := s.n.l.ctx
	t := time.NewTimer(healthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			var closing []*redis.PubSub
			s.mu.Lock()
			for _, ns := range s.nodes {
				closing = s.dropLocked(ns, closing)
			}
			s.mu.Unlock()
			closeAll(&closing)
			return
		case <-s.kick:
		case <-t.C:
		}
		next := s.sync(ctx)
		t.Reset(next)
	}
}

// sync does one round of run's work and returns how long until the next.
func (s *shards) sync(ctx context.Context) time.Duration {
	now := time.Now()
	next := healthInterval
	var todo []int
	var closing []*redis.PubSub
	defer closeAll(&closing)
	s.mu.Lock()
	if s.off.Load() {
		clear(s.slots)
		for _, ns := range s.nodes {
			closing = s.dropLocked(ns, closing)
		}
		s.mu.Unlock()
		return healthInterval
	}
	for slot, ss := range s.slots {
		switch {
		case ss.waiters == 0 && now.Sub(ss.idle) > linger:
			delete(s.slots, slot)
			if ns := ss.node; ns != nil {
				delete(ns.slots, slot)
				if len(ns.slots) == 0 {
					closing = s.dropLocked(ns, closing)
				} else {
					ns.unsub[slot]++
					s.queueLocked(ns, "+"+*s.channel(slot))
				}
			}
		case ss.node != nil:
		case now.Before(ss.retry):
			next = min(next, ss.retry.Sub(now))
		default:
			todo = append(todo, slot)
		}
	}
	s.mu.Unlock()
	for _, slot := range todo {
		s.subscribe(ctx, slot)
	}
	return next
}

// subscribe has slot subscribed to on the connection to its master.
func (s *shards) subscribe(ctx context.Context, slot int) {
	ch := s.channel(slot)
	lctx, cancel := context.WithTimeout(ctx, s.n.l.opt.Timeout)
	master, err := s.cc.MasterForKey(lctx, *ch)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.slots[slot]
	if ss == nil || ss.node != nil {
		return
	}
	if err != nil {
		s.failedLocked(ss)
		return
	}
	addr := master.Options().Addr
	if addr == ss.avoid && time.Now().Before(ss.avoidUntil) {
		s.failedLocked(ss) // the client's layout is not yet current
		return
	}
	ns := s.nodes[addr]
	if ns == nil {
		ns = &nodeSub{addr: addr, ps: s.cc.SSubscribe(s.n.l.ctx), slots: make(map[int]bool), unsub: make(map[int]int), wake: make(chan struct{}, 1), gone: make(chan struct{})}
		s.nodes[addr] = ns
		go s.write(ns)
	}
	ss.node = ns
	ns.slots[slot] = true
	s.queueLocked(ns, *ch)
}

func (s *shards) queueLocked(ns *nodeSub, ch string) {
	ns.todo = append(ns.todo, ch)
	select {
	case ns.wake <- struct{}{}:
	default:
	}
}

// failedLocked schedules ss's next subscription after its back-off, and
// has the client read the Cluster's layout again: a failure to subscribe
// follows a slot that moved or a master that failed.
func (s *shards) failedLocked(ss *slotSub) {
	ss.node, ss.ready = nil, false
	ss.retry = time.Now().Add(ss.backoff)
	ss.backoff = min(2*ss.backoff, time.Second)
	s.cc.ReloadState(s.n.l.ctx)
	s.wake()
}

// dropLocked retires ns, and returns closing with its subscription, which
// the caller closes once it no longer holds s.mu (a PubSub's Close waits
// for a dial in progress); its slots are subscribed to again (by run).
func (s *shards) dropLocked(ns *nodeSub, closing []*redis.PubSub) []*redis.PubSub {
	select {
	case <-ns.gone:
		return closing
	default:
	}
	close(ns.gone)
	if s.nodes[ns.addr] == ns {
		delete(s.nodes, ns.addr)
	}
	for slot := range ns.slots {
		if ss := s.slots[slot]; ss != nil && ss.node == ns {
			s.failedLocked(ss)
		}
	}
	return append(closing, ns.ps)
}

func closeAll(pss *[]*redis.PubSub) {
	for _, ps := range *pss {
		_ = ps.Close()
	}
	*pss = nil
}

func (s *shards) drop(ns *nodeSub) {
	s.mu.Lock()
	closing := s.dropLocked(ns, nil)
	s.mu.Unlock()
	closeAll(&closing)
}

// refused stops the Engine's shard subscriptions for good: the server
// refused one with err (no sharded pub/sub, or an ACL that denies it).
func (s *shards) refused(err error) {
	if s.off.Swap(true) {
		return
	}
	s.wake() // run drops every connection
	if lg := s.n.l.opt.Logger; lg != nil {
		lg.Warn("routelock: the Redis Cluster refuses shard subscriptions: hand-overs to other instances are published to every node", "err", err)
	}
}

// lost ends slot's subscription on ns: the server ended it, or refused it
// (the slot is served elsewhere), so ns's node is avoided for a while. A
// connection left with no slot is closed.
func (s *shards) lost(ns *nodeSub, slot int) {
	var closing []*redis.PubSub
	s.mu.Lock()
	if ns.slots[slot] {
		delete(ns.slots, slot)
		if ss := s.slots[slot]; ss != nil && ss.node == ns {
			ss.avoid, ss.avoidUntil = ns.addr, time.Now().Add(avoidFor)
			s.failedLocked(ss)
		}
		if len(ns.slots) == 0 {
			closing = s.dropLocked(ns, nil)
		}
	}
	s.mu.Unlock()
	closeAll(&closing)
}

// unsubscribed reports whether a "sunsubscribe" of slot on ns answers an
// unsubscription the Engine sent, rather than the server's own.
func (s *shards) unsubscribed(ns *nodeSub, slot int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns.unsub[slot] == 0 {
		return false
	}
	if ns.unsub[slot]--; ns.unsub[slot] == 0 {
		delete(ns.unsub, slot)
	}
	return true
}

// confirmed is told that slot's subscription on ns is in place: hand-overs
// published before it were missed, so the slot's waiters ask Redis again.
func (s *shards) confirmed(ns *nodeSub, slot int) {
	s.mu.Lock()
	ss := s.slots[slot]
	ok := ss != nil && ss.node == ns
	if ok {
		ss.backoff, ss.ready = 10*time.Millisecond, true
	}
	s.mu.Unlock()
	if ok {
		s.n.nudgeSlot(slot)
	}
}

// ready reports whether the Engine's subscription to its shard channel of
// slot is confirmed.
func (s *shards) ready(slot int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.slots[slot]
	return ss != nil && ss.ready
}

// write sends ns's subscriptions, and starts its reader once the first is
// sent: a PubSub read before it has a channel would connect to any node.
func (s *shards) write(ns *nodeSub) {
	ctx := s.n.l.ctx
	for {
		select {
		case <-ns.gone:
			return
		case <-ns.wake:
		}
		s.mu.Lock()
		todo := ns.todo
		ns.todo = nil
		s.mu.Unlock()
		for _, ch := range todo {
			// Bounded: with no connection, the first call dials.
			cctx, cancel := context.WithTimeout(ctx, s.n.l.opt.Timeout)
			var err error
			if c, ok := strings.CutPrefix(ch, "+"); ok {
				err = ns.ps.SUnsubscribe(cctx, c)
			} else {
				err = ns.ps.SSubscribe(cctx, ch)
			}
			cancel()
			if err != nil {
				s.drop(ns)
				return
			}
		}
		if !ns.read && len(todo) > 0 {
			ns.read = true
			go s.receive(ns)
		}
	}
}

// receive reads ns's messages until it fails or is dropped.
func (s *shards) receive(ns *nodeSub) {
	ctx := s.n.l.ctx
	defer s.drop(ns)
	pinged := false
	for {
		msg, err := ns.ps.ReceiveTimeout(ctx, healthInterval)
		if err != nil {
			if slot, to, ok := redirected(err); ok {
				if to == ns.addr {
					// Sent to the node the client took for ns's, the
					// connection is on another: the layout changed as
					// it was made.
					return
				}
				s.lost(ns, slot)
				continue
			}
			if refusal(err) {
				s.refused(err)
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !pinged {
				pinged = true
				if ns.ps.Ping(ctx) == nil {
					continue
				}
			}
			return
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			s.n.deliver(m.Payload)
		case *redis.Subscription:
			slot := slotOf(m.Channel)
			switch m.Kind {
			case "ssubscribe":
				s.confirmed(ns, slot)
			case "sunsubscribe":
				// Asked for (the slot was idle), or the server's: the
				// slot moved.
				if !s.unsubscribed(ns, slot) {
					s.lost(ns, slot)
				}
			}
		}
	}
}

// refusal reports whether err says the server will not take a command,
// however often it is sent: it does not know it, or an ACL denies it.
func refusal(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(strings.ToLower(msg), "unknown command")
}

// redirected reports whether err is a MOVED or ASK answer, with its slot
// and the address it sends the client to.
func redirected(err error) (slot int, to string, ok bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return 0, "", false
	}
	f := strings.Fields(re.Error())
	if len(f) != 3 || f[0] != "MOVED" && f[0] != "ASK" {
		return 0, "", false
	}
	slot, perr := strconv.Atoi(f[1])
	return slot, f[2], perr == nil && slot >= 0 && slot < slots
}
