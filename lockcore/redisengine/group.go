package redisengine

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// maxGroup is the most keys AcquireGroup takes in one call; more are taken
// one by one.
const maxGroup = 32

// group is the holds that AcquireGroup took together: they are released
// together, in one pipeline, when the last of them is.
type group struct {
	holds []*hold
	left  atomic.Int32 // holds not yet released
}

// AcquireGroup implements lockcore.GroupEngine: it takes the exclusive
// locks of keys in one call to Redis, all or none, when every one of them
// is free and nobody waits for it. The leases it returns are released
// together, in one round trip, when the last of them is (lockcore.ReleaseAll
// releases them in a row); a lease released alone before the others keeps
// its key in Redis until then, unrenewed: at most one TTL.
//
// It does not try, and returns (nil, nil), for shared acquisitions, for a
// context that holds or carries a lock already (re-entry), on a Cluster
// when the keys are in more than one slot, when replicas must acknowledge
// acquisitions (Options.Replicas), before the Engine has read the server's
// settings, and for more than 32 keys; nor after finding one of the keys
// held or waited for, unless p.Wait is lockcore.FailFast: it then fails
// with that key's *lockcore.ContentionError. Its other errors are
// Acquire's.
func (l *Engine) AcquireGroup(ctx context.Context, keys []lockcore.Key, p lockcore.Policy) ([]*lockcore.Lease, error) {
	if len(keys) < 2 || len(keys) > maxGroup || p.Share != 0 || p.Validate() != nil || l.run.ack > 0 ||
		!l.settled.Load() || l.refuse.Load() != nil || l.closed.Load() || ctx.Err() != nil ||
		len(lockcore.TokensFrom(ctx)) > 0 {
		return nil, nil
	}
	if p.TTL == 0 {
		p.TTL = l.opt.TTL
	}
	now := time.Now()
	hs := make([]*hold, len(keys))
	for i, k := range keys {
		if k == (lockcore.Key{}) {
			return nil, nil
		}
		h := l.newHold(k, lockcore.NewToken(), p.TTL)
		h.slot = -1
		h.setEntry(l.nextID(now))
		if !l.guarded && i > 0 && slotOf(h.keys[0]) != slotOf(hs[0].keys[0]) {
			return nil, nil // a Cluster's slots: one by one, each in its own
		}
		hs[i] = h
	}
	if int64(p.TTL) > l.longest.Load() {
		l.lengthen(p.TTL)
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
	a[j], a[j+1], a[j+2] = l.ttlArg(p.TTL), l.retArg, *l.longestArg.Load()
	j += 3
	for _, h := range hs {
		a[j], a[j+1] = h.args[3], h.args[4]
		j += 2
	}
	c.late = func(c *call) {
		if err := c.cmd.Err(); err == nil {
			if _, refused := grantedAll(c.cmd, len(hs)); refused != nil {
				return // refused: nothing was written
			}
		} else if l.neverSent(err) {
			return
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
	if err != nil {
		for _, h := range hs {
			l.undo(ctx, h, "", err)
		}
		return nil, l.failed(ctx, hs[0].key, err)
	}
	l.answered()
	fences, refused := grantedAll(v, len(hs))
	if fences == nil {
		if refused == nil {
			return nil, errUnexpected(v)
		}
		if p.Wait != lockcore.FailFast {
			return nil, nil // AcquireAll waits for them one by one
		}
		k := hs[refused[0]].key
		return nil, &lockcore.ContentionError{Key: k.String(), RetryAfter: l.stats.retryAfter(k, time.Duration(refused[1])*time.Millisecond)}
	}

	g := &group{holds: hs}
	g.left.Store(int32(len(hs)))
	leases, closed := make([]*lockcore.Lease, len(hs)), false
	for i, h := range hs {
		h.fence, h.grp, h.start = fences[i], g, time.Now()
		h.ls = lockcore.NewLease(ctx, l, h.key, h.token, h.fence, h, l.opt.Events)
		if !l.wd.add(h, now, h.ttl) {
			closed = true
		}
		leases[i], ctx = h.ls, h.ls.Context()
	}
	if closed {
		// Closed while acquiring: given back, as Acquire does.
		for _, h := range hs {
			l.wd.remove(h)
			h.lose(lockcore.ErrClosed)
			l.withdraw(h, "")
		}
		return nil, lockcore.ErrClosed
	}
	for _, ls := range leases {
		lockcore.LimitHold(ls, p.MaxHold)
	}
	return leases, nil
}

// grantedAll reads the reply of the group acquire script for n locks (a
// reply or the command): their fences when it took them all; otherwise
// nil and, when it refused, the index of the lock it found held or waited
// for (-1: the restart guard) and that lock's remaining lease or the
// guard's in ms; nil, nil for any other reply.
func grantedAll(v any, n int) (fences []int64, refused []int) {
	if cmd, ok := v.(redis.Cmder); ok {
		v = cmd.(*redis.Cmd).Val()
	}
	switch v := v.(type) {
	case int64:
		if v <= 0 {
			return nil, []int{0, int(-v)}
		}
	case []any:
		if len(v) == 3 && v[0] == int64(0) {
			i, ok1 := v[1].(int64)
			pttl, ok2 := v[2].(int64)
			if ok1 && ok2 && i >= 1 && int(i) <= n {
				return nil, []int{int(i) - 1, int(pttl)}
			}
			return nil, nil
		}
		if len(v) != n {
			return nil, nil
		}
		fences = make([]int64, n)
		for i, f := range v {
			f, ok := f.(int64)
			if !ok || f <= 0 {
				return nil, nil
			}
			fences[i] = f
		}
		return fences, nil
	}
	return nil, nil
}

// errUnexpected is the error of a reply the group acquire script does not
// give.
func errUnexpected(v any) error {
	return fmt.Errorf("redisengine: unexpected reply %v from the group acquire script", v)
}

// releaseGroup releases g's holds, the last of which is h, in one
// pipeline; it returns h's error, as Release does. The other holds'
// releases that fail go on in the background, as h's does.
func (l *Engine) releaseGroup(ctx context.Context, g *group, h *hold) error {
	sent := time.Now()
	cs := make([]*call, len(g.holds))
	for i, gh := range g.holds {
		cs[i] = l.releaseCall(ctx, gh, "", sent)
	}
	var mine error
	woke := false
	for i, out := range l.batch.doAll(cs) {
		gh := g.holds[i]
		var (
			n   int64
			err error
		)
		if out == answered {
			n, err, woke = cs[i].n, cs[i].cmd.Err(), woke || cs[i].woke
			cs[i].recycle()
		} else {
			err = errNoAnswer
		}
		switch {
		case err != nil:
			err = l.report(unavailable("release", err))
			l.latch(gh, err)
		case n == -3:
			err = lockcore.ErrRevoked
		default:
			l.answered()
		}
		if gh == h {
			mine = err
		}
	}
	if woke {
		runtime.Gosched() // as release
	}
	return mine
}
