package redisengine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/lockcore"
)

// holdStats keeps, per resource name (a key's first part, such as
// productID), an exponentially weighted mean of how long this Engine's
// holds of it lasted, from which a refused caller is told when to retry.
// Releases update it without a lock: the map is read-mostly, and each mean
// is one atomic word.
type holdStats struct {
	means sync.Map     // name → *atomic.Int64, the mean in ns
	names atomic.Int32 // how many names are kept
}

// maxNames bounds how many resource names holdStats remembers: names come
// from code, but a key built from user input alone must not grow the map.
const maxNames = 1024

// resourceName returns the first part of k: its name, for keys built by
// the adapters.
func resourceName(k lockcore.Key) string { return k.Name() }

// record adds a hold of k that lasted d.
func (s *holdStats) record(k lockcore.Key, d time.Duration) {
	name := resourceName(k)
	v, ok := s.means.Load(name)
	if !ok {
		if s.names.Load() >= maxNames {
			return
		}
		m := new(atomic.Int64)
		m.Store(int64(d))
		if v, ok = s.means.LoadOrStore(name, m); !ok {
			s.names.Add(1)
			return
		}
	}
	m := v.(*atomic.Int64)
	for {
		old := m.Load()
		if m.CompareAndSwap(old, old+(int64(d)-old)/8) {
			return
		}
	}
}

// firstRetry is the retry hint while nothing is known of a resource's
// holds (see lockcore.ContentionError.RetryAfter): short, for a client to
// back off from, since the holder's remaining lease says only how long a
// holder that crashed would keep the lock, not when a live one is done.
const firstRetry = 100 * time.Millisecond

// retryAfter returns when a caller refused k may retry: the mean hold of
// k's resource, and never more than pttl, the holder's remaining lease;
// firstRetry (or pttl, if shorter) while nothing is known.
func (s *holdStats) retryAfter(k lockcore.Key, pttl time.Duration) time.Duration {
	m := firstRetry
	if v, ok := s.means.Load(resourceName(k)); ok {
		if d := time.Duration(v.(*atomic.Int64).Load()); d > 0 {
			m = d
		}
	}
	return min(m, pttl)
}
