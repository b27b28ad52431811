package quorumengine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/routelock/lock/lockcore"
)

// hold is a hold the engine took on a quorum of masters: the lock's
// holder's, or a re-entry by its owner token.
type hold struct {
	e            *engine
	key          lockcore.Key
	ttl          time.Duration
	token        string // the holder's owner token
	mine         string // the token the hold is kept under on the masters: token, or a re-entry's own
	attempt      string // the id of the attempt that won it
	fence        int64
	route, trace string

	stop     chan struct{}  // closed by end: the renewals stop
	inflight sync.WaitGroup // its confirmations in flight
	expiry   *time.Timer    // ends the hold when its validity runs out unconfirmed

	once  sync.Once
	done  chan struct{}
	mu    sync.Mutex
	until time.Time // valid until then (monotonic clock)
	err   error     // why it ended, once it has
}

var (
	errExpired  error = &both{"routelock: lease lost: a quorum of masters did not confirm it before its validity ran out (lock service unavailable)", [2]error{lockcore.ErrLockLost, lockcore.ErrUnavailable}}
	errTaken          = fmt.Errorf("%w: no quorum of masters holds it any more", lockcore.ErrLockLost)
	errReleased       = errors.New("routelock: released")
)

// both is an error that matches two sentinels.
type both struct {
	msg string
	is  [2]error
}

func (b *both) Error() string { return b.msg }
func (b *both) Is(target error) bool {
	return target != nil && (target == b.is[0] || target == b.is[1])
}

// validity returns until when a hold confirmed by a call sent at sent is
// valid: its TTL less the clock drift, less the margin in which its loss
// is told before any other owner can win a quorum.
func (h *hold) validity(sent time.Time) time.Time {
	drift := time.Duration(float64(h.ttl)*h.e.opt.Drift) + 2*time.Millisecond
	return sent.Add(h.ttl - drift - h.ttl/10)
}

// end ends h with cause err, once: its Done closes and its renewals stop.
func (h *hold) end(err error) {
	h.once.Do(func() {
		h.mu.Lock()
		h.err = err
		h.mu.Unlock()
		if h.expiry != nil {
			h.expiry.Stop()
		}
		close(h.stop)
		close(h.done)
		h.e.mu.Lock()
		delete(h.e.holds, h)
		h.e.mu.Unlock()
	})
}

// renew confirms h on the masters every third of its TTL (a tenth after a
// round without a quorum) until it ends. Its loss by the clock is not
// its: the expiry timer ends h when its validity runs out, without I/O.
func (h *hold) renew() {
	e := h.e
	defer e.busy.done()
	next := h.ttl / 3
	for {
		t := time.NewTimer(next)
		select {
		case <-h.stop:
			t.Stop()
			return
		case <-t.C:
		}
		sent := time.Now()
		h.mu.Lock()
		until, ended := h.until, h.err != nil
		if !ended {
			// The round counts as in flight from before the hold can end
			// (end takes h.mu): a release waits for it.
			h.inflight.Add(1)
		}
		h.mu.Unlock()
		if ended {
			return
		}
		var lost error
		ok := e.confirmed(h, until, func(reason string) {
			if reason == "" {
				lost = errTaken
				return
			}
			lost = fmt.Errorf("%w: %s", lockcore.ErrRevoked, reason)
		})
		h.inflight.Done()
		if ev := e.opt.Events; ev != nil {
			switch {
			case ok:
				ev.Renewed(h.key, nil)
			case lost != nil:
				ev.Renewed(h.key, lost)
			default:
				ev.Renewed(h.key, fmt.Errorf("%w: no quorum of masters confirmed the renewal", lockcore.ErrUnavailable))
			}
		}
		switch {
		case lost != nil:
			h.end(lost)
			return
		case ok:
			v := h.validity(sent)
			h.mu.Lock()
			if h.err == nil && v.After(h.until) {
				h.until = v
				h.expiry.Reset(time.Until(v))
			}
			h.mu.Unlock()
			next = h.ttl / 3
		default:
			next = h.ttl / 10
		}
	}
}

func (h *hold) Fence() int64          { return h.fence }
func (h *hold) Shared() (int, bool)   { return -1, false }
func (h *hold) Token() string         { return h.token }
func (h *hold) Done() <-chan struct{} { return h.done }

// Err implements lockcore.Hold: nil while the hold is valid by the
// engine's clock and has not ended.
func (h *hold) Err() error {
	h.mu.Lock()
	err, until := h.err, h.until
	h.mu.Unlock()
	switch {
	case err == errReleased:
		return fmt.Errorf("%w: released", lockcore.ErrLockLost)
	case err != nil:
		return err
	case !time.Now().Before(until):
		return errExpired
	}
	return nil
}

// Release implements lockcore.Hold: it gives the hold up on every master,
// lost or not (a hold lost by the clock may still be on some), and
// returns why it was lost, if it was.
func (h *hold) Release(ctx context.Context, early error) error {
	h.mu.Lock()
	lost := h.err
	h.mu.Unlock()
	h.end(errReleased)
	err := h.giveUp(ctx)
	if lost != nil && lost != errReleased {
		return lost
	}
	return err
}

// giveUp deletes h on every master; it waits for a quorum, at most the
// engine's Timeout, and leaves the other calls in flight until four
// times that.
func (h *hold) giveUp(ctx context.Context) error {
	e := h.e
	// A confirmation still in flight to a master that lags would take
	// the hold there again after the release: it lands first, or its
	// deadline passes, for a Timeout at most.
	landed := make(chan struct{})
	go func() { h.inflight.Wait(); close(landed) }()
	select {
	case <-landed:
	case <-time.After(e.opt.Timeout):
	}
	keys := []string{e.lockKey(h.key.String()), e.goneKey(h.key.String(), h.attempt)}
	// It waits for a quorum a while; each call goes on until it is
	// answered, for the hold's TTL at most (no later confirmation of it
	// outlives that).
	now := time.Now()
	replies := e.callFor(nil, now.Add(4*e.opt.Timeout), now.Add(max(h.ttl, 4*e.opt.Timeout)), releaseScript, keys, func(int) []any { return []any{h.mine, h.ttl.Milliseconds()} }, func(got []reply) bool {
		n := 0
		for _, g := range got {
			if g.err == nil {
				n++
			}
		}
		return n >= e.quorum || len(got) == len(e.masters)
	})
	n := 0
	var first error
	for _, g := range replies {
		if g.err == nil {
			n++
		} else if first == nil {
			first = g.err
		}
	}
	if n < e.quorum {
		return fmt.Errorf("%w: release: %d of %d masters answered: %w", lockcore.ErrUnavailable, n, len(e.masters), first)
	}
	return nil
}
