package admin_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/routelock/lock/lockcore"
)

// memOp is an in-memory lockcore.Operator: locks are set by the test, and
// Revoke does what the Redis engine does to them (the audit record, a
// fence past the revoked one, the first waiter granted).
type memOp struct {
	mu    sync.Mutex
	locks map[string]lockcore.Info
	err   error // every call fails with it when set
	now   time.Time

	// What the calls asked for.
	prefix  string
	limit   int
	reasons []string
}

func newMemOp() *memOp {
	return &memOp{locks: map[string]lockcore.Info{}, now: time.Date(2026, 11, 23, 14, 2, 3, 456789000, time.UTC)}
}

func (m *memOp) set(in lockcore.Info) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.locks[in.Key] = in
}

func (m *memOp) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.err = err
}

func (m *memOp) List(_ context.Context, prefix string, limit int) ([]lockcore.Info, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prefix, m.limit = prefix, limit
	if m.err != nil {
		return nil, false, m.err
	}
	var keys []string
	for k, in := range m.locks {
		if strings.HasPrefix(k, prefix) && ((len(in.Holders) > 0) || len(in.Waiters) > 0) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	more := false
	if limit > 0 && len(keys) > limit {
		keys, more = keys[:limit], true
	}
	out := make([]lockcore.Info, len(keys))
	for i, k := range keys {
		out[i] = m.locks[k]
	}
	return out, more, nil
}

func (m *memOp) Inspect(_ context.Context, key lockcore.Key) (lockcore.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return lockcore.Info{}, m.err
	}
	if in, ok := m.locks[key.String()]; ok {
		return in, nil
	}
	return lockcore.Info{Key: key.String()}, nil
}

func (m *memOp) Revoke(_ context.Context, key lockcore.Key, reason string) (lockcore.Revocation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reasons = append(m.reasons, reason)
	if m.err != nil {
		return lockcore.Revocation{}, m.err
	}
	in, ok := m.locks[key.String()]
	if !ok || len(in.Holders) == 0 {
		return lockcore.Revocation{}, lockcore.ErrNotHeld
	}
	in.LastFence++
	r := lockcore.Revocation{Key: in.Key, Owner: in.Holders[0].Owner, Fence: in.Fence, NewFence: in.LastFence, Reason: reason, At: m.now}
	in.Audit = append([]lockcore.Revocation{r}, in.Audit...)
	in.Holders, in.Fence, in.TTL = nil, 0, 0
	if len(in.Waiters) > 0 {
		w := in.Waiters[0]
		in.Waiters = in.Waiters[1:]
		in.LastFence++
		in.Holders = []lockcore.Holder{{Owner: "granted0", Count: 1, Instances: []string{w.Instance}, Since: m.now}}
		in.Fence, in.TTL = in.LastFence, 10*time.Second
	}
	m.locks[in.Key] = in
	return r, nil
}
