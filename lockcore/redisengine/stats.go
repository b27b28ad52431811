package redisengine

import (
	"strings"
	"sync"
	"time"

	"github.com/routelock/lock/lockcore"
)

// holdStats keeps, per resource name (a key's first part, such as
// productID), an exponentially weighted mean of how long this Engine's
// holds of it lasted, from which a refused caller is told when to retry.
type holdStats struct {
	mu    sync.Mutex
	means map[string]time.Duration
}

// maxNames bounds how many resource names holdStats remembers: names come
// from code, but a key built from user input alone must not grow the map.
const maxNames = 1024

// resourceName returns the first part of k: its name, for keys built by
// the adapters.
func resourceName(k lockcore.Key) string {
	s := k.String()
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return s[:i]
	}
	return s
}

// record adds a hold of k that lasted d.
func (s *holdStats) record(k lockcore.Key, d time.Duration) {
	name := resourceName(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.means[name]
	switch {
	case ok:
		s.means[name] = m + (d-m)/8
	case len(s.means) < maxNames:
		if s.means == nil {
			s.means = make(map[string]time.Duration)
		}
		s.means[name] = d
	}
}

// retryAfter returns when a caller refused k may retry: the mean hold of
// k's resource, and never more than pttl, the holder's remaining lease;
// pttl itself while nothing is known.
func (s *holdStats) retryAfter(k lockcore.Key, pttl time.Duration) time.Duration {
	name := resourceName(k)
	s.mu.Lock()
	m, ok := s.means[name]
	s.mu.Unlock()
	if !ok || m <= 0 || m > pttl {
		return pttl
	}
	return m
}
