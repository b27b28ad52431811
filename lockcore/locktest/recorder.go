package locktest

import (
	"context"
	"sync"
	"time"

	"github.com/routelock/lock/lockcore"
)

// recorder is the lockcore.Events of the engines of one check: it counts
// what they report per key, and wakes await on every report.
type recorder struct {
	mu      sync.Mutex
	keys    map[lockcore.Key]*tally
	changed chan struct{} // closed and replaced on every report
}

// tally is what the engines reported of one key.
type tally struct {
	queued   int     // Waiting(+1) calls
	waiting  int     // the sum of Waiting's deltas
	negative bool    // the sum went below 0
	woken    int     // Woken calls
	ended    []error // the causes of the Ended calls, in order
}

func newRecorder() *recorder {
	return &recorder{keys: make(map[lockcore.Key]*tally), changed: make(chan struct{})}
}

// update applies f to the tally of key and wakes await.
func (r *recorder) update(key lockcore.Key, f func(*tally)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.keys[key]
	if c == nil {
		c = new(tally)
		r.keys[key] = c
	}
	f(c)
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) Waiting(key lockcore.Key, delta int) {
	r.update(key, func(c *tally) {
		if delta > 0 {
			c.queued++
		}
		c.waiting += delta
		c.negative = c.negative || c.waiting < 0
	})
}

func (r *recorder) Woken(key lockcore.Key, _ string) {
	r.update(key, func(c *tally) { c.woken++ })
}

func (r *recorder) Renewed(lockcore.Key, error) {}

func (r *recorder) Ended(_ context.Context, key lockcore.Key, _, _ time.Duration, cause, _ error) {
	r.update(key, func(c *tally) { c.ended = append(c.ended, cause) })
}

// tally returns a copy of what was reported of key.
func (r *recorder) tally(key lockcore.Key) tally {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.keys[key]; c != nil {
		t := *c
		t.ended = append([]error(nil), c.ended...)
		return t
	}
	return tally{}
}

// await blocks until cond, asked with the recorder's lock held after every
// report, reports true, or for at most awaitBound, or until ctx ends.
func (r *recorder) await(ctx context.Context, cond func(map[lockcore.Key]*tally) bool) error {
	ctx, cancel := context.WithTimeout(ctx, awaitBound)
	defer cancel()
	for {
		r.mu.Lock()
		ok, ch := cond(r.keys), r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
