package locktest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/routelock/lock/lockcore"
)

// result is a kept result (lockcore.Results) and when it expires.
type result struct {
	res   []byte
	until time.Time
}

// errNotHeld is the error of a Keep whose hold was released before.
var errNotHeld = fmt.Errorf("%w: locktest: the hold no longer holds its key", lockcore.ErrLockLost)

// Result implements lockcore.Results.
func (e *Engine) Result(ctx context.Context, key lockcore.Key) ([]byte, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, false, lockcore.ErrClosed
	}
	r, ok := e.result(key, time.Now())
	return bytes.Clone(r.res), ok, nil
}

// result returns the result of key at now, dropping it when it expired.
// e.mu is held.
func (e *Engine) result(key lockcore.Key, now time.Time) (result, bool) {
	r, ok := e.results[key]
	if ok && !now.Before(r.until) {
		delete(e.results, key)
		return result{}, false
	}
	return r, ok
}

// Keep implements lockcore.Results: it stores res and releases h under the
// engine's lock, as long as h was neither released nor lost (Revoke,
// Close); a Keep of a hold that kept already stores nothing and returns
// nil. Results expire keep after the store, by the wall clock. h must be an
// exclusive hold of key taken by e, and keep a millisecond at least, as
// for the Redis engine; otherwise Keep fails with an error matching
// lockcore.ErrMisconfigured.
func (e *Engine) Keep(ctx context.Context, key lockcore.Key, t lockcore.Hold, res []byte, keep time.Duration) error {
	h, ok := t.(*hold)
	switch {
	case !ok || h.e != e:
		return fmt.Errorf("%w: locktest.Engine.Keep of a hold this Engine did not take", lockcore.ErrMisconfigured)
	case h.ks.key != key:
		return fmt.Errorf("%w: locktest.Engine.Keep of a hold of another key", lockcore.ErrMisconfigured)
	case h.o.share != 0:
		return fmt.Errorf("%w: locktest.Engine.Keep of a shared hold: results are kept by exclusive holders only", lockcore.ErrMisconfigured)
	case keep < time.Millisecond:
		return fmt.Errorf("%w: locktest.Engine.Keep for %v: keep it a millisecond at least", lockcore.ErrMisconfigured, keep)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if h.kept {
		if e.defects.keepAgain {
			e.store(key, res, keep)
		}
		return nil // the same Keep again: stored once
	}
	if h.done {
		if e.defects.keepLost {
			e.store(key, res, keep)
		}
		if err := h.Err(); err != nil {
			return err
		}
		return errNotHeld
	}
	h.kept = true
	if e.defects.keepApart {
		e.drop(h)
		e.mu.Unlock()
		e.afterNext(h.ks, h.o.fence)
		e.mu.Lock()
	} else {
		defer e.drop(h) // after the store, under the same lock
	}
	e.store(key, res, keep)
	if !e.defects.keepGrants {
		// The waiters that want the result get it, as they would the
		// key in turn; the others take the key in turn.
		q := h.ks.queue[:0]
		for _, w := range h.ks.queue {
			if w.result {
				w.found = bytes.Clone(res)
				close(w.ready)
				continue
			}
			q = append(q, w)
		}
		clear(h.ks.queue[len(q):])
		h.ks.queue = q
	}
	return nil
}

// store stores res for key for keep. e.mu is held.
func (e *Engine) store(key lockcore.Key, res []byte, keep time.Duration) {
	if e.results == nil {
		e.results = make(map[lockcore.Key]result)
	}
	if i := bytes.IndexByte(res, '\n'); i >= 0 && e.defects.keepTrim {
		res = res[:i]
	}
	e.results[key] = result{res: bytes.Clone(res), until: time.Now().Add(keep)}
}

// apartWindow is how long the keepApart defect waits for a next holder.
const apartWindow = 100 * time.Millisecond

// afterNext returns once the hold of ks taken after the one of fence has
// ended, or when none was taken within apartWindow: the keepApart
// defect's delay between a release and its store. Every wait is bounded.
func (e *Engine) afterNext(ks *keyState, fence int64) {
	ctx, cancel := context.WithTimeout(context.Background(), apartWindow)
	defer cancel()
	taken := func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return ks.counter > fence
	}
	if e.Await(ctx, taken) != nil {
		return
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.Await(ctx, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return !slices.ContainsFunc(ks.owners, func(o *owner) bool { return o.fence == fence+1 })
	})
}

// DropResult implements lockcore.Results.
func (e *Engine) DropResult(ctx context.Context, key lockcore.Key) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false, lockcore.ErrClosed
	}
	_, ok := e.result(key, time.Now())
	if !e.defects.dropKept {
		delete(e.results, key)
	}
	return ok, nil
}

// StoredResults implements lockcore.Results: limit must be positive, as
// for the Redis engine.
func (e *Engine) StoredResults(ctx context.Context, prefix string, limit int) ([]lockcore.StoredResult, bool, error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("%w: locktest.Engine.StoredResults: limit %d must be positive", lockcore.ErrMisconfigured, limit)
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, false, lockcore.ErrClosed
	}
	var out []lockcore.StoredResult
	for k := range e.results {
		if r, ok := e.result(k, now); ok && strings.HasPrefix(k.String(), prefix) {
			out = append(out, lockcore.StoredResult{Key: k, Size: int64(len(r.res)), Expires: r.until})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}
