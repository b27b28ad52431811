package redisengine

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A failover client (Sentinel) sends every command to the server the
// sentinels last named master, and learns of a new one only some time
// after Sentinel promoted it: when the sentinels announce the switch, or
// when it dials and asks them. In that window the old master still takes
// writes, and what the Engine does there is lost when Sentinel demotes it:
//
//   - a release there of a hold taken before the promotion drops it from
//     the old master only: the new master keeps the hold, which nobody
//     renews or releases, and nobody else gets the lock until its lease
//     runs out (a whole TTL);
//   - a renewal there extends the lease on the old master only;
//   - a hold taken there was never on the new master.
//
// So the Engine watches the connections its client dials: when one goes
// to another server than the last one did, the master changed, and the
// Engine sends again every release and withdrawal it sent within the last
// lease (each is idempotent: one that ran before changes nothing), and
// renews every hold it has at once, so that a hold the new master lacks
// ends its holder's context now, and is logged, rather than at its next
// renewal.
type switches struct {
	on   bool // a failover client: releases are kept and dials watched
	mu   sync.Mutex
	addr string // the server the last connection went to
	sent []resent
	head int // sent[head:] are kept; the rest is spent
}

// resent is a release (member "") or a withdrawal (member, the waiter's)
// of h, kept until until, after which Redis holds nothing of it anyway.
type resent struct {
	h      *hold
	member string
	until  time.Time
}

// maxResent bounds how many releases an Engine keeps to send again after
// a switch (the last lease's, at most this many: at 3,000 releases a
// second and a TTL of 10 s, the newest 30,000 of them).
const maxResent = 1 << 16

// watchSwitches makes l keep its releases and watch its client's dials,
// when rdb is a failover client.
func (l *Engine) watchSwitches(rdb redis.UniversalClient) {
	if !isFailover(rdb) {
		return
	}
	l.sw.on = true
	// A client has no way to take a hook off: that of an Engine closed
	// since stays, and does nothing.
	rdb.AddHook(dialWatch{l})
}

// dialWatch is the hook through which an Engine sees its client's dials.
type dialWatch struct{ l *Engine }

func (d dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		if err == nil && !d.l.closed.Load() {
			d.l.dialed(cn.RemoteAddr().String())
		}
		return cn, err
	}
}

func (dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// kept records a release or withdrawal of h sent at sent, to be sent again
// after a switch.
func (l *Engine) kept(h *hold, member string, sent time.Time) {
	if !l.sw.on {
		return
	}
	s := &l.sw
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.head < len(s.sent) && (len(s.sent)-s.head >= maxResent || s.sent[s.head].until.Before(sent)) {
		s.sent[s.head] = resent{}
		s.head++
	}
	if s.head > len(s.sent)/2 {
		// Reuse the spent half of the slice.
		n := copy(s.sent, s.sent[s.head:])
		clear(s.sent[n:])
		s.sent, s.head = s.sent[:n], 0
	}
	s.sent = append(s.sent, resent{h: h, member: member, until: sent.Add(h.ttl)})
}

// dialed is told of every connection the client dials, by the address it
// went to. The first after another server's is a master switch.
func (l *Engine) dialed(addr string) {
	s := &l.sw
	s.mu.Lock()
	was := s.addr
	s.addr = addr
	if was == "" || was == addr {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	var again []resent
	for _, r := range s.sent[s.head:] {
		if r.until.After(now) {
			again = append(again, r)
		}
	}
	s.mu.Unlock()
	if lg := l.opt.Logger; lg != nil {
		lg.Info("routelock: Redis master switched: releases sent again there, holds renewed at once",
			"from", was, "to", addr, "releases", len(again))
	}
	l.wd.renewAll()
	if len(again) == 0 {
		return
	}
	// Not on the dialling goroutine: the client is dialling for a call,
	// which waits.
	// Sixteen at a time, which the batcher pipelines.
	next := make(chan resent)
	for range min(16, len(again)) {
		l.bg.do(func() {
			for r := range next {
				_, _ = l.send(context.Background(), r.h, r.member)
			}
		})
	}
	l.bg.do(func() {
		defer close(next)
		for _, r := range again {
			select {
			case next <- r:
			case <-l.ctx.Done():
				return
			}
		}
	})
}
