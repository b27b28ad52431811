package lockcore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquire takes h's key in Redis for h.token and sets h.fence. It returns
// when the acquiring call was sent: the lease is valid for h.ttl from then.
func (l *Locker) acquire(ctx context.Context, h *hold, wait time.Duration) (time.Time, error) {
	id := l.nextID()
	ttl := ms(h.ttl)
	if wait <= 0 {
		sent := time.Now()
		v, err := l.runAcquire(ctx, h, 0, id, "")
		if err != nil {
			return sent, l.acquireFailed(ctx, h, id, "", err)
		}
		if v <= 0 {
			return sent, &ContentionError{Key: h.key.s, RetryAfter: time.Duration(-v) * time.Millisecond, err: ErrNotAcquired}
		}
		h.fence = v
		return sent, nil
	}

	deadline := time.Now().Add(wait)
	var timeout error // what ran out at the deadline: the budget (nil) or ctx
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, timeout = d, context.DeadlineExceeded
	}
	// The member names this attempt in the key's wait queue. Its deadline is
	// on this host's wall clock; Redis drops it once its own clock passes it.
	member := strconv.FormatInt(deadline.UnixMilli(), 10) + " " + strconv.FormatInt(ttl, 10) + " " +
		l.channel + " " + id + " " + h.token
	w := l.nf.register(id, h.keys[0])
	defer l.nf.unregister(w)
	var timer *time.Timer // made when first needed: most acquisitions find the lock free
	var pttl int64
	for {
		sent := time.Now()
		left := deadline.Sub(sent)
		if left <= 0 {
			return sent, l.giveUp(h, id, member, pttl, timeout)
		}
		v, err := l.runAcquire(ctx, h, ms(left), id, member)
		if err != nil {
			return sent, l.acquireFailed(ctx, h, id, member, err)
		}
		if v > 0 {
			h.fence = v
			return sent, nil
		}
		pttl = -v
		// Sleep until handed the lock, or until the holder's lease would have
		// run out (the notification may be lost), or the deadline.
		sleep := min(time.Duration(pttl)*time.Millisecond+time.Millisecond, time.Until(deadline))
		if timer == nil {
			timer = time.NewTimer(sleep)
			defer timer.Stop()
		} else {
			timer.Reset(sleep)
		}
		select {
		case f := <-w.ch:
			if f > 0 {
				h.fence = f
				return sent, nil
			}
			// Nudged: the subscription was re-established, or a release
			// whose reply was lost may have handed the lock to this
			// attempt; the next call says.
		case <-timer.C:
		case <-ctx.Done():
			return sent, l.giveUp(h, id, member, pttl, ctx.Err())
		case <-l.ctx.Done():
			l.abandon(h, id, member)
			return sent, ErrClosed
		}
	}
}

// runAcquire runs the acquire script for attempt id of h, waiting up to
// wait ms (0: fail fast) in the queue as member. It returns the fencing
// token (> 0) when h holds the lock, or minus the holder's remaining lease
// in ms (<= 0) when another owner does.
func (l *Locker) runAcquire(ctx context.Context, h *hold, wait int64, id, member string) (int64, error) {
	var args [12]any
	args[2] = 3
	copy(args[3:7], h.args[:])
	args[7], args[8], args[9], args[10], args[11] = l.ttlArg(h.ttl), l.retArg, wait, id, member
	return l.batch.run(ctx, acquireScript, args[:]).(*redis.IntCmd).Result()
}

// release runs the release script for h: a plain release of one count when
// id is empty, else the withdrawal of attempt id queued as member. It returns
// the script's count (0: released; -1: not held by h's token; -2: withdrawn).
//
// When the lock goes to a waiter of this Locker, Redis publishes nothing and
// the reply names the waiter, which release wakes: one socket written and
// read instead of two. If the reply is lost, the lock may have gone to one
// of this Locker's waiters on the key without their knowing, so they ask
// Redis again.
func (l *Locker) release(ctx context.Context, h *hold, id, member string) (int64, error) {
	var args [11]any
	args[2] = 3
	copy(args[3:7], h.args[:])
	args[7], args[8], args[9], args[10] = l.retArg, id, member, l.chanArg
	cmd := l.batch.run(ctx, releaseScript, args[:]).(*redis.Cmd)
	if err := cmd.Err(); err != nil {
		l.nf.nudge(h.keys[0])
		return 0, err
	}
	switch v := cmd.Val().(type) {
	case int64:
		return v, nil
	case []any:
		if len(v) == 3 {
			to, ok1 := v[1].(string)
			f, ok2 := v[2].(int64)
			if ok1 && ok2 {
				l.nf.handOver(to, f)
				// The new holder runs before the rest of the old holder's
				// work, as sync.Mutex hands off in starvation mode: without
				// this the woken goroutine waits for the releasing one to
				// block next.
				runtime.Gosched()
				return 0, nil
			}
		}
	}
	l.nf.nudge(h.keys[0])
	return 0, fmt.Errorf("lockcore: unexpected release reply %v", cmd.Val())
}

// giveUp withdraws a waiter whose wait ended; cause is the context's error,
// or nil when the wait budget ran out.
func (l *Locker) giveUp(h *hold, id, member string, pttl int64, cause error) error {
	l.abandon(h, id, member)
	ce := &ContentionError{Key: h.key.s, RetryAfter: time.Duration(max(pttl, 0)) * time.Millisecond, err: ErrWaitTimeout}
	if cause != nil {
		if errors.Is(cause, context.DeadlineExceeded) {
			return errors.Join(ce, cause)
		}
		ce.err = ErrNotAcquired
		return errors.Join(ce, cause)
	}
	return ce
}

// acquireFailed handles a failed acquire call. The call may have taken the
// lock in Redis even though its reply never came (a timeout, a cancelled
// context, a dropped connection), so unless the connection was never made
// the attempt is withdrawn: a request that failed holds nothing. When Redis
// is failing, the withdrawal runs in the background so that the caller gets
// its error at once.
func (l *Locker) acquireFailed(ctx context.Context, h *hold, id, member string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		l.abandon(h, id, member)
		return errors.Join(&ContentionError{Key: h.key.s, err: ErrNotAcquired}, cerr)
	}
	var op *net.OpError
	if !(errors.As(err, &op) && op.Op == "dial") {
		l.bg.Add(1)
		go func() {
			defer l.bg.Done()
			l.abandon(h, id, member)
		}()
	}
	return unavailable("acquire", err)
}

// abandon withdraws attempt id: it leaves the wait queue and releases a hold
// granted to the attempt. With an empty id it releases one count of h.
func (l *Locker) abandon(h *hold, id, member string) {
	_, _ = l.release(l.detach(context.Background()), h, id, member)
}
