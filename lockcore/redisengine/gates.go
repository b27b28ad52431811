package redisengine

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// gates is what an Engine knows of the closed gates (lockcore.Gatekeeper):
// a map from escaped key to gate, replaced whole on every change, so that
// the check every acquisition makes is a load and a lookup without a lock.
//
// In Redis the closed gates are a hash, <prefix>gates, of escaped key to
// "<since ms> <until ms>" (0: until opened), on the closer's clock. A
// change is written there and published on the channel <prefix>gates as
// "close <key> <since ms> <until ms>" or "open <key>", by one script on the
// hash's server (so that the messages come in the order of the writes),
// which every Engine's subscription receives. An Engine reads the whole hash when its
// subscription is (re)established, so that one that was away learns what
// it missed, and again every settingsEvery.
type gates struct {
	m    atomic.Pointer[map[string]lockcore.Gate]
	mu   sync.Mutex   // serializes writers of m
	seen atomic.Int64 // messages applied: a read of the hash that overlapped one reads again
}

// gatesKey and gatesChannel return the hash and the channel of the gates.
func (l *Engine) gatesKey() string     { return l.opt.Prefix + "gates" }
func (l *Engine) gatesChannel() string { return l.opt.Prefix + "gates" }

// GateOf implements lockcore.Gatekeeper: the gate of key, when this Engine
// knows it closed, from memory.
func (l *Engine) GateOf(key lockcore.Key) (lockcore.Gate, bool) {
	m := l.gates.m.Load()
	if m == nil {
		return lockcore.Gate{}, false
	}
	g, ok := (*m)[key.String()]
	if !ok || g.Open(time.Now()) {
		return lockcore.Gate{}, false
	}
	return g, true
}

// CloseGate implements lockcore.Gatekeeper: the gate of key closes on this
// Engine at once, and on every Engine with the same Prefix on this Redis
// as soon as the message reaches it. It fails with ErrUnavailable when
// Redis does not take it.
func (l *Engine) CloseGate(ctx context.Context, key lockcore.Key, d time.Duration) error {
	if key == (lockcore.Key{}) {
		return fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey)
	}
	if d < 0 {
		return fmt.Errorf("%w: a gate closed for %v", lockcore.ErrMisconfigured, d)
	}
	// In whole ms, as the other Engines read it; the end rounded up, so
	// that no Engine opens the gate before d has passed.
	g := lockcore.Gate{Key: key, Since: time.UnixMilli(time.Now().UnixMilli())}
	var until int64
	if d > 0 {
		until = (time.Now().Add(d).UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
		g.Until = time.UnixMilli(until)
	}
	v := strconv.FormatInt(g.Since.UnixMilli(), 10) + " " + strconv.FormatInt(until, 10)
	l.setGate(key.String(), g, true)
	return l.writeGate(ctx, key, v)
}

// OpenGate implements lockcore.Gatekeeper: the gate of key opens on this
// Engine at once, and on the others as soon as the message reaches them.
func (l *Engine) OpenGate(ctx context.Context, key lockcore.Key) error {
	l.setGate(key.String(), lockcore.Gate{}, false)
	return l.writeGate(ctx, key, "")
}

// Gates implements lockcore.Gatekeeper: the closed gates in Redis, by key.
// Gates whose time is up are dropped from Redis on the way.
func (l *Engine) Gates(ctx context.Context) ([]lockcore.Gate, error) {
	m, err := l.readGates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]lockcore.Gate, 0, len(m))
	for _, g := range m {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out, nil
}

// writeGate closes the gate of key in Redis with value v, or opens it
// when v is "", and tells the other Engines (lua/gate.lua); it waits for
// Redis up to Options.Timeout.
func (l *Engine) writeGate(ctx context.Context, key lockcore.Key, v string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opt.Timeout)
	defer cancel()
	cmd := l.run.cmd(ctx, gateScript, []any{nil, nil, 1, l.gatesKey(), l.gatesChannel(), key.String(), v})
	cmds := []redis.Cmder{cmd}
	if err := l.run.run(ctx, cmds); err != nil {
		return l.report(unavailable("gate", err))
	}
	if err := cmds[0].Err(); err != nil {
		return l.report(unavailable("gate", err))
	}
	return nil
}

// readGates reads the closed gates from Redis, dropping those whose time
// is up there too.
func (l *Engine) readGates(ctx context.Context) (map[string]lockcore.Gate, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opt.Timeout)
	defer cancel()
	all, err := l.rdb.HGetAll(ctx, l.gatesKey()).Result()
	if err != nil {
		return nil, l.report(unavailable("gates", err))
	}
	m := make(map[string]lockcore.Gate, len(all))
	var done []string
	now := time.Now()
	for k, v := range all {
		g, ok := parseGate(k, v)
		switch {
		case !ok:
		case g.Open(now):
			done = append(done, k)
		default:
			m[k] = g
		}
	}
	if len(done) > 0 {
		_ = l.rdb.HDel(ctx, l.gatesKey(), done...).Err() // tidying: the next read tries again
	}
	return m, nil
}

// parseGate reads the gate of escaped key k from its value in Redis,
// "<since ms> <until ms>".
func parseGate(k, v string) (lockcore.Gate, bool) {
	key, err := lockcore.ParseKey(k)
	s, u, ok := strings.Cut(v, " ")
	if err != nil || !ok {
		return lockcore.Gate{}, false
	}
	since, err1 := strconv.ParseInt(s, 10, 64)
	until, err2 := strconv.ParseInt(u, 10, 64)
	if err1 != nil || err2 != nil {
		return lockcore.Gate{}, false
	}
	g := lockcore.Gate{Key: key, Since: time.UnixMilli(since)}
	if until > 0 {
		g.Until = time.UnixMilli(until)
	}
	return g, true
}

// setGate sets (closed) or clears the gate of escaped key k in memory.
func (l *Engine) setGate(k string, g lockcore.Gate, closed bool) {
	l.gates.mu.Lock()
	defer l.gates.mu.Unlock()
	old := l.gates.m.Load()
	m := make(map[string]lockcore.Gate)
	if old != nil {
		for k, g := range *old {
			m[k] = g
		}
	}
	if closed {
		m[k] = g
	} else {
		delete(m, k)
	}
	l.gates.m.Store(&m)
}

// gateMessage applies a message of the gates channel.
func (l *Engine) gateMessage(payload string) {
	l.gates.seen.Add(1)
	if k, ok := strings.CutPrefix(payload, "open "); ok {
		l.setGate(k, lockcore.Gate{}, false)
		return
	}
	rest, ok := strings.CutPrefix(payload, "close ")
	if !ok {
		return
	}
	k, v, ok := strings.Cut(rest, " ")
	if !ok {
		return
	}
	if g, ok := parseGate(k, v); ok {
		l.setGate(k, g, true)
	}
}

// watchGates reads the gates from Redis every settingsEvery until the
// Engine closes (see reloadGates).
func (l *Engine) watchGates() { l.every(settingsEvery, l.reloadGates) }

// reloadGates replaces what the Engine knows of the gates with what Redis
// has, in the background: when its subscription is (re)established, and
// every settingsEvery. A read that messages overlapped is made again (a few
// times at most): the message may be newer than the read.
func (l *Engine) reloadGates() {
	l.bg.do(func() {
		for range 3 {
			seen := l.gates.seen.Load()
			m, err := l.readGates(l.ctx)
			if err != nil {
				return
			}
			l.gates.mu.Lock()
			if l.gates.seen.Load() == seen {
				l.gates.m.Store(&m)
				l.gates.mu.Unlock()
				return
			}
			l.gates.mu.Unlock()
		}
	})
}
