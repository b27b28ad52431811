package redisengine

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// maxGroup is the most keys TakeAll takes in one call; more are taken
// one by one.
const maxGroup = 32

// TakeAll implements lockcore.Batch: it takes the exclusive locks of rs'
// keys in one call to Redis, all or none, when every one of them is free
// and nobody waits for it.
//
// It does not try, and returns (nil, nil), for shared acquisitions, for a
// context that holds or carries any lock already (re-entry: Join), on a
// Cluster when the keys are in more than one slot (each key has a slot of
// its own but for the chance of a hash collision, so on a Cluster this is
// rare), when replicas must acknowledge acquisitions (Options.Replicas),
// before the Engine has read the server's settings and the closed gates,
// and for more than 32 keys;
// nor after finding one of the keys held or waited for, unless the Wait is
// lockcore.FailFast and the key is held: it then fails with that key's
// *lockcore.ContentionError. Its other errors are Take's.
func (l *Engine) TakeAll(ctx context.Context, rs []lockcore.Request) ([]lockcore.Hold, error) {
	if l.closed.Load() {
		return nil, nil // one by one, each ErrClosed, as Take checks first
	}
	for _, r := range rs {
		// A closed gate refuses the lot before any call, whether or not
		// they could go together.
		if err := l.gated(ctx, r); err != nil {
			return nil, err
		}
	}
	if len(rs) < 2 || len(rs) > maxGroup || l.run.ack > 0 || l.opt.OperatorOnly ||
		!l.settled.Load() || !l.gates.known.Load() || l.refuse.Load() != nil || l.closed.Load() || ctx.Err() != nil {
		return nil, nil
	}
	ttl, wait := rs[0].TTL, rs[0].Wait
	if ttl == 0 {
		ttl = l.opt.TTL
	}
	for _, r := range rs {
		if r.Share != 0 || len(r.Join) > 0 || r.TTL != rs[0].TTL || r.Wait != wait {
			return nil, nil
		}
	}
	if ttl > l.opt.MaxTTL {
		return nil, nil // one by one, each refused
	}
	now := time.Now()
	hs := make([]*hold, len(rs))
	for i, r := range rs {
		h := l.newHold(r.Key, r.Token, ttl)
		h.slot = -1
		h.setOrigin(r.Route, r.Trace)
		h.setEntry(l.nextID(now))
		if l.cluster && i > 0 && slotOf(h.keys[0]) != slotOf(hs[0].keys[0]) {
			return nil, nil // a Cluster's slots: one by one, each in its own
		}
		hs[i] = h
	}

	c := newCall()
	c.ctx, c.h, c.sent, c.deadline = ctx, hs[0], now, now.Add(l.opt.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(c.deadline) {
		c.deadline = d
	}
	// The restart guard, each lock's hold, queue and fence; the TTL, the
	// fences' retention, the longest lease; each lock's token and entry.
	n := 7 + 5*len(hs)
	a := c.args[:]
	if n > len(a) {
		a = make([]any, n)
	}
	a = a[:n]
	a[2], a[3] = 1+3*len(hs), hs[0].guard
	j := 4
	for _, h := range hs {
		a[j], a[j+1], a[j+2] = h.args[0], h.args[1], h.args[2]
		j += 3
	}
	a[j], a[j+1], a[j+2] = l.ttlArg(ttl), l.retArg, l.maxArg
	j += 3
	for _, h := range hs {
		a[j], a[j+1] = h.args[3], h.args[4]
		j += 2
	}
	c.late = func(c *call) {
		if err := c.cmd.Err(); err == nil {
			if r := readGroup(c.cmd.(*redis.Cmd).Val(), len(hs)); r.refused() {
				return // nothing was written
			}
		} else if l.neverSent(err) || redis.HasErrorPrefix(err, "GUARD") {
			return // nothing was written
		}
		l.bg.do(func() {
			for _, h := range hs {
				l.withdraw(h, "")
			}
		})
	}
	c.cmd = l.run.cmd(ctx, allScript, a)

	var (
		v   any
		err error
	)
	switch l.batch.do(ctx, c) {
	case answered:
		v, err = c.cmd.(*redis.Cmd).Result()
		c.recycle()
	case unsent:
		c.recycle()
		err = errUnsent
	default:
		err = errNoAnswer
	}
	if gerr := l.guardError(err); gerr != nil {
		// Refused by the restart guard before writing anything: the same
		// for every key, alone or together.
		l.answered()
		return nil, gerr
	}
	if err != nil {
		for _, h := range hs {
			l.undo(ctx, h, "", err)
		}
		return nil, l.failed(ctx, hs[0].key, err)
	}
	l.answered()
	r := readGroup(v, len(hs))
	switch {
	case r.fences != nil:
	case !r.refused():
		// Ran before (a re-sent call) and partly undone since, or a reply no
		// run gives: whatever it holds is given back.
		err := fmt.Errorf("group acquire script replied %v", v)
		for _, h := range hs {
			l.undo(ctx, h, "", err)
		}
		return nil, l.failed(ctx, hs[0].key, err)
	case wait != lockcore.FailFast || r.pttl == 0:
		// A held key to wait for, or a free one that others queue for,
		// which a lone fail-fast attempt may still take: AcquireAll takes
		// them one by one.
		return nil, nil
	default:
		k := hs[r.busy].key
		return nil, &lockcore.ContentionError{Key: k.String(), RetryAfter: l.stats.retryAfter(k, time.Duration(r.pttl)*time.Millisecond)}
	}

	if late(now, ttl) {
		// Answered with too little of the leases left: given back, as
		// Take does.
		for _, h := range hs {
			h.ended.Store(true)
			l.bg.do(func() { l.withdraw(h, "") })
		}
		return nil, unavailable("acquire", errLate)
	}
	ts := make([]lockcore.Hold, len(hs))
	for i, h := range hs {
		h.fence, h.start = r.fences[i], time.Now()
		ts[i] = h
	}
	if !l.wd.addAll(now, ttl, hs...) {
		// Closed while acquiring: given back, as Take does.
		for _, h := range hs {
			h.lose(lockcore.ErrClosed)
			l.withdraw(h, "")
		}
		return nil, lockcore.ErrClosed
	}
	return ts, nil
}

// groupReply is a reply of the group acquire script for n locks.
type groupReply struct {
	fences []int64 // each lock's, when it took them all (or had, when run before)
	busy   int     // the index of the lock it found held or waited for; -1: none
	pttl   int64   // that lock's remaining lease in ms (0: free but waited for)
}

// refused reports a reply that took nothing: a held lock.
func (r groupReply) refused() bool { return r.fences == nil && r.busy >= 0 }

// readGroup reads v, the group acquire script's reply for n locks. A reply
// it does not know is neither taken nor refused.
func readGroup(v any, n int) groupReply {
	r := groupReply{busy: -1}
	switch v := v.(type) {
	case []any:
		if len(v) == 3 && v[0] == int64(0) {
			i, ok1 := v[1].(int64)
			pttl, ok2 := v[2].(int64)
			if ok1 && ok2 && i >= 1 && int(i) <= n {
				r.busy, r.pttl = int(i)-1, pttl
			}
			return r
		}
		if len(v) != n {
			return r
		}
		fences := make([]int64, n)
		for i, f := range v {
			f, ok := f.(int64)
			if !ok || f <= 0 {
				return r
			}
			fences[i] = f
		}
		r.fences = fences
	}
	return r
}

// ReleaseAll implements lockcore.Batch: the releases of holds that this
// Engine made go to Redis in one pipeline, each as its Release would send
// it on its own; any other hold is released by its Release.
func (l *Engine) ReleaseAll(ctx context.Context, ts []lockcore.Hold) []error {
	errs := make([]error, len(ts))
	var (
		mine []*hold
		at   []int
	)
	for i, t := range ts {
		if h, ok := t.(*hold); ok && h.l == l {
			h.letGo()
			mine, at = append(mine, h), append(at, i)
			continue
		}
		errs[i] = t.Release(ctx, nil)
	}
	if len(mine) == 0 {
		return errs
	}
	sent := time.Now()
	cs := make([]*call, len(mine))
	for i, h := range mine {
		cs[i] = l.releaseCall(ctx, h, "", sent)
	}
	woke := false
	for i, out := range l.batch.doAll(cs) {
		var (
			n   int64
			err = errNoAnswer
		)
		if out == answered {
			n, err, woke = cs[i].n, cs[i].cmd.Err(), woke || cs[i].woke
			cs[i].recycle()
			if err == nil {
				l.answered()
			}
		}
		errs[at[i]] = mine[i].released(n, err)
	}
	if woke {
		runtime.Gosched() // as release does
	}
	return errs
}
