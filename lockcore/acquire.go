package lockcore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"
)

// Replies of the acquire script.
const (
	statusBusy      = 0
	statusAcquired  = 1
	statusReentered = 2
)

// acquire takes h's key in Redis for h.token and sets h.fence. It returns
// when the acquiring call was sent: the lease is valid for h.ttl from then.
func (l *Locker) acquire(ctx context.Context, h *hold, wait time.Duration) (time.Time, error) {
	id := l.nextID()
	ttl, ret := ms(h.ttl), ms(l.opt.FenceRetention)
	if wait <= 0 {
		sent := time.Now()
		status, v, err := runAcquire(ctx, l, h, ttl, ret, 0, id, "")
		if err != nil {
			return sent, l.acquireFailed(ctx, h, id, "", err)
		}
		if status == statusBusy {
			return sent, &ContentionError{Key: h.key.s, RetryAfter: time.Duration(v) * time.Millisecond, err: ErrNotAcquired}
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
	w := l.nf.register(id)
	defer l.nf.unregister(w)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var pttl int64
	for {
		resync := l.nf.resyncChan()
		sent := time.Now()
		left := deadline.Sub(sent)
		if left <= 0 {
			return sent, l.giveUp(h, id, member, pttl, timeout)
		}
		status, v, err := runAcquire(ctx, l, h, ttl, ret, ms(left), id, member)
		if err != nil {
			return sent, l.acquireFailed(ctx, h, id, member, err)
		}
		if status != statusBusy {
			h.fence = v
			return sent, nil
		}
		pttl = v
		// Sleep until handed the lock, or until the holder's lease would have
		// run out (the notification may be lost), or the deadline.
		sleep := time.Duration(max(pttl, 0))*time.Millisecond + time.Millisecond
		timer.Reset(min(sleep, time.Until(deadline)))
		select {
		case f := <-w.ch:
			h.fence = f
			return sent, nil
		case <-timer.C:
		case <-resync:
		case <-ctx.Done():
			return sent, l.giveUp(h, id, member, pttl, ctx.Err())
		case <-l.ctx.Done():
			l.abandon(h, id, member)
			return sent, ErrClosed
		}
	}
}

func runAcquire(ctx context.Context, l *Locker, h *hold, ttl, ret, wait int64, id, member string) (status, v int64, err error) {
	res, err := acquireScript.Run(ctx, l.rdb, h.keys, h.token, ttl, ret, wait, id, member).Slice()
	if err != nil {
		return 0, 0, err
	}
	if len(res) != 2 {
		return 0, 0, errors.New("unexpected acquire reply")
	}
	status, ok := res[0].(int64)
	if !ok {
		return 0, 0, errors.New("unexpected acquire reply")
	}
	switch x := res[1].(type) {
	case int64:
		v = x
	case string:
		if v, err = strconv.ParseInt(x, 10, 64); err != nil {
			return 0, 0, errors.New("unexpected acquire reply")
		}
	default:
		return 0, 0, errors.New("unexpected acquire reply")
	}
	return status, v, nil
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
	ctx, cancel := context.WithTimeout(context.Background(), l.opt.ReleaseTimeout)
	defer cancel()
	_ = releaseScript.Run(ctx, l.rdb, h.keys, h.token, ms(l.opt.FenceRetention), id, member).Err()
}
