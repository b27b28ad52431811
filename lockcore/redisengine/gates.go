package redisengine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/background"
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
// which every Engine's subscription receives. An Engine reads the whole
// hash before it decides its first acquisition (knowGates), when its
// subscription is (re)established, so that one that was away learns what
// it missed, and again every settingsEvery.
type gates struct {
	m    atomic.Pointer[map[string]gateEntry]
	mu   sync.Mutex   // serializes writers of m
	seen atomic.Int64 // messages applied: a read of the hash that overlapped one reads again
	// again: the subscription has been established before (gatesSubscribed)
	again atomic.Bool
	// known: m holds a read of the hash (and the messages since), not
	// only what the Engine heard: until then an acquisition waits for a
	// read (knowGates).
	known atomic.Bool
	// started: the first read of the hash has begun (settle), and first
	// is closed when it has ended, read or not.
	started atomic.Bool
	first   chan struct{}
	// rereading is closed when the read of the hash under way (reread)
	// has ended; nil when none is. Under rmu.
	rmu       sync.Mutex
	rereading chan struct{}
	// failed: why the last read of the hash failed, nil once one has
	// landed.
	failed atomic.Pointer[error]
}

// gateEntry is a closed gate and the error that refuses its key, made
// once.
type gateEntry struct {
	g   lockcore.Gate
	err error
}

// gatesKey and gatesChannel return the hash and the channel of the gates.
// The channel names the client's database: Pub/Sub does not, and Engines
// with one Prefix on two databases of one server (staging and production)
// must not close each other's gates.
func (l *Engine) gatesKey() string     { return l.opt.Prefix + "gates" }
func (l *Engine) gatesChannel() string { return l.gatesChan }

// maxGate is the longest time a gate may be closed for; 0 closes it until
// opened.
const maxGate = 100 * 365 * 24 * time.Hour

// GateOf implements lockcore.Gatekeeper: the gate of key, from memory,
// with the error that refuses it, made once per gate. A new Engine reads
// the gates from Redis first (knowGates), so that it refuses a closed
// resource from its first request; an OperatorOnly one, which takes no
// lock, refuses it as its Take would. A closed Engine returns what it last
// knew of the gate with ErrClosed, which refuses the acquisition as its
// Take would: it no longer hears the gates, so a product it knew closed
// may have been restocked since.
func (l *Engine) GateOf(ctx context.Context, key lockcore.Key) (lockcore.Gate, error) {
	if l.closed.Load() {
		e, _ := l.gateEntry(key)
		return e.g, lockcore.ErrClosed
	}
	if l.opt.OperatorOnly {
		e, _ := l.gateEntry(key)
		return e.g, errOperatorOnly
	}
	if err := l.knowGates(ctx); err != nil {
		return lockcore.Gate{}, err
	}
	e, _ := l.gateEntry(key)
	return e.g, e.err
}

// gated returns the error that refuses r when the Locker did not check
// its gate (r.GateChecked: it does not know this Engine's gates, as under
// a wrapper that is no Gatekeeper) and it is closed; readers and restocks
// pass.
func (l *Engine) gated(ctx context.Context, r lockcore.Request) error {
	if r.GateChecked || r.Share < 0 || r.Restock {
		return nil
	}
	_, err := l.GateOf(ctx, r.Key)
	return err
}

// gateError is the error of an acquisition of key that its closed gate
// refuses: it matches lockcore.ErrGateClosed and names key.
func gateError(key lockcore.Key) error {
	return fmt.Errorf("%w: %s", lockcore.ErrGateClosed, key)
}

// knowGates returns once the Engine knows the closed gates from Redis, so
// that an acquisition is refused from the Engine's first one on: it waits
// for the first read (see settle: sent when the first acquisition begins,
// one round trip), and when that read did not land, for one more, shared
// by the acquisitions under way (reread). It fails with ErrUnavailable
// when ctx ends first (the error then matches ctx.Err() too) or the reads
// have not landed within Options.Timeout, however long the client would
// take to give up, and with what the read found (ErrMisconfigured, say)
// when it failed. Once known, the gates are kept by the messages and the reads
// that follow: this is a load.
func (l *Engine) knowGates(ctx context.Context) error {
	if l.gates.known.Load() {
		return nil
	}
	l.settle(ctx)
	// Waited for no longer than Options.Timeout, as every call of an
	// acquisition is, whatever the client does with deadlines: a client
	// that ignores them (go-redis's default) may take seconds to give up.
	t := time.NewTimer(l.opt.Timeout)
	defer t.Stop()
	for _, read := range []func() <-chan struct{}{
		func() <-chan struct{} { return l.gates.first },
		l.reread, // the first read failed: one more, shared by every acquisition meanwhile
	} {
		select {
		case <-read():
		case <-ctx.Done():
			// Waiting on Redis, not on another owner.
			return errors.Join(unavailable("gates", errNoAnswer), ctx.Err())
		case <-t.C:
			return unavailable("gates", errNoAnswer)
		}
		if l.gates.known.Load() {
			return nil
		}
	}
	if err := l.gates.failed.Load(); err != nil {
		return *err // what the read found: a server set up wrongly is no outage
	}
	return unavailable("gates", errNoAnswer)
}

// reread starts a read of the gates in the background, unless one is
// under way, and returns a channel closed when it has ended, read or not.
func (l *Engine) reread() <-chan struct{} {
	g := &l.gates
	g.rmu.Lock()
	defer g.rmu.Unlock()
	if g.rereading == nil {
		done := make(chan struct{})
		g.rereading = done
		l.bg.do(func() {
			_ = l.loadGates(l.ctx)
			g.rmu.Lock()
			g.rereading = nil
			g.rmu.Unlock()
			close(done)
		})
	}
	return g.rereading
}

// gateEntry returns key's closed gate, if it is closed.
func (l *Engine) gateEntry(key lockcore.Key) (gateEntry, bool) {
	m := l.gates.m.Load()
	if m == nil || len(*m) == 0 {
		return gateEntry{}, false
	}
	e, ok := (*m)[key.String()]
	if !ok || opened(e.g, time.Now()) {
		return gateEntry{}, false
	}
	return e, true
}

// CloseGate implements lockcore.Gatekeeper: the gate of key closes in
// Redis, on this Engine once Redis has confirmed it, and on every Engine
// with the same Prefix on this Redis as soon as the message reaches it.
// It fails with ErrUnavailable when Redis does not confirm it: then no
// Engine closes the gate, unless the write landed after all, when every
// one does (its message, or their next read of the gates). The write is
// taken under memory pressure (a maxmemory reached, noeviction), as the
// locks' releases are: a gate is a small field, and refusing it would
// leave the other instances selling on.
func (l *Engine) CloseGate(ctx context.Context, key lockcore.Key, d time.Duration) error {
	if key == (lockcore.Key{}) {
		return fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey)
	}
	if d < 0 || d > maxGate {
		return fmt.Errorf("%w: a gate closed for %v; 0 closes it until opened", lockcore.ErrMisconfigured, d)
	}
	if e, ok := l.gateEntry(key); ok && d == 0 && e.g.Until.IsZero() {
		// Closed until opened already, as the buyers still queued find it
		// one after another: nothing to write.
		return nil
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
	return l.writeGate(ctx, key, v, g)
}

// OpenGate implements lockcore.Gatekeeper: the gate of key opens in Redis,
// on this Engine once Redis has confirmed it, and on the others as soon as
// the message reaches them; it fails as CloseGate does.
func (l *Engine) OpenGate(ctx context.Context, key lockcore.Key) error {
	return l.writeGate(ctx, key, "", lockcore.Gate{})
}

// Gates implements lockcore.Gatekeeper: the closed gates in Redis, by key.
// Gates whose time is up are dropped from Redis on the way.
func (l *Engine) Gates(ctx context.Context) ([]lockcore.Gate, error) {
	m, err := l.readGates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]lockcore.Gate, 0, len(m))
	for _, e := range m {
		out = append(out, e.g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out, nil
}

// writeGate closes the gate of key in Redis with value v (g, as this
// Engine keeps it), or opens it when v is "", and tells the other Engines
// (lua/gate.lua); it waits for Redis up to Options.Timeout. Once Redis
// confirms it, this Engine keeps the change too, unless a message came in
// meanwhile: that may be the change itself, or a newer one (another
// Engine's, written after it), which must not be undone; the change's own
// message follows any older one.
func (l *Engine) writeGate(ctx context.Context, key lockcore.Key, v string, g lockcore.Gate) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opt.Timeout)
	defer cancel()
	seen := l.gates.seen.Load()
	cmd := l.run.cmd(ctx, gateScript, []any{nil, nil, 1, l.gatesKey(), l.gatesChannel(), key.String(), v})
	cmds := []redis.Cmder{cmd}
	if err := l.run.run(ctx, cmds); err != nil {
		return l.report(unavailable("gate", err))
	}
	if err := cmds[0].Err(); err != nil {
		return l.report(unavailable("gate", err))
	}
	l.gates.mu.Lock()
	defer l.gates.mu.Unlock()
	if l.gates.seen.Load() == seen {
		l.putGate(key.String(), g, v != "")
	}
	return nil
}

// readGates reads the closed gates from Redis, dropping those whose time
// is up there too.
func (l *Engine) readGates(ctx context.Context) (map[string]gateEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opt.Timeout)
	defer cancel()
	all, err := l.rdb.HGetAll(ctx, l.gatesKey()).Result()
	if err != nil {
		return nil, l.report(unavailable("gates", err))
	}
	l.answered()
	m := make(map[string]gateEntry, len(all))
	var done []string // gates whose time is up
	now := time.Now()
	for k, v := range all {
		g, ok := parseGate(k, v)
		switch {
		case !ok:
		case opened(g, now):
			done = append(done, k)
		default:
			m[k] = gateEntry{g: g, err: gateError(g.Key)}
		}
	}
	for _, k := range done {
		// Tidying, only if it was not closed again since: the next read
		// tries again.
		_ = l.run.run(ctx, []redis.Cmder{l.run.cmd(ctx, gateScript, []any{nil, nil, 1, l.gatesKey(), l.gatesChannel(), k, "", all[k]})})
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

// putGate sets (closed) or clears the gate of escaped key k in memory,
// with l.gates.mu held. It counts as news, as a message does: a read of
// the gates that began before it is made again (loadGates) rather than
// undo it.
func (l *Engine) putGate(k string, g lockcore.Gate, closed bool) {
	l.gates.seen.Add(1)
	old := l.gates.m.Load()
	m := make(map[string]gateEntry)
	if old != nil {
		for k, e := range *old {
			m[k] = e
		}
	}
	if closed {
		m[k] = gateEntry{g: g, err: gateError(g.Key)}
	} else {
		delete(m, k)
	}
	l.gates.m.Store(&m)
}

// gateMessage applies a message of the gates channel. It counts as news
// and changes the gates under one hold of the mutex, so that a write of
// this Engine's own (writeGate) that sees the news sees the change too.
func (l *Engine) gateMessage(payload string) {
	l.gates.mu.Lock()
	defer l.gates.mu.Unlock()
	l.gates.seen.Add(1)
	if k, ok := strings.CutPrefix(payload, "open "); ok {
		l.putGate(k, lockcore.Gate{}, false)
		return
	}
	rest, ok := strings.CutPrefix(payload, "close ")
	if !ok {
		return
	}
	// "<key> <since> <until>": a segment's key has a space of its own
	// (" #3", see lockcore.ParseKey), so the times are the last two fields.
	i := strings.LastIndexByte(rest, ' ')
	if i < 0 {
		return
	}
	j := strings.LastIndexByte(rest[:i], ' ')
	if j < 0 {
		return
	}
	k, v := rest[:j], rest[j+1:]
	if g, ok := parseGate(k, v); ok {
		l.putGate(k, g, true)
	}
}

// watchGates reads the gates from Redis every settingsEvery until the
// Engine closes (see reloadGates).
func (l *Engine) watchGates() { l.every(settingsEvery, l.reloadGates) }

// reloadGates replaces what the Engine knows of the gates with what Redis
// has, in the background (see loadGates).
func (l *Engine) reloadGates() {
	l.bg.do(func() { _ = l.loadGates(l.ctx) })
}

// loadGates replaces what the Engine knows of the gates with what Redis
// has: before the first acquisition is decided (see settle, knowGates),
// when the subscription is established again, and every settingsEvery. A
// read that messages overlapped is made again (a few times at most): the
// message may be newer than the read. It returns the error of a read that
// failed, or one matching ErrUnavailable when messages overlapped every
// read.
func (l *Engine) loadGates(ctx context.Context) error {
	ctx = background.Mark(ctx)
	for range 3 {
		seen := l.gates.seen.Load()
		m, err := l.readGates(ctx)
		if err != nil {
			l.gates.failed.Store(&err)
			return err
		}
		l.gates.mu.Lock()
		if l.gates.seen.Load() == seen {
			l.gates.m.Store(&m)
			l.gates.known.Store(true)
			l.gates.failed.Store(nil)
			l.gates.mu.Unlock()
			return nil
		}
		l.gates.mu.Unlock()
	}
	return unavailable("gates", errors.New("the gates changed during every read"))
}

// gatesSubscribed is told that the subscription to the gates channel is
// established: messages may have been missed while it was down, or since
// the first read of the gates began (see settle), so they are read again;
// unless this is the first subscription and that read is still to begin,
// and Redis was not found unreachable meanwhile (the read then tells the
// log whether it answers again).
func (l *Engine) gatesSubscribed() {
	if l.gates.again.Swap(true) || l.gates.started.Load() || l.downSince.Load() != 0 {
		l.reloadGates()
	}
}

// opened reports whether gate g has opened by itself at now: its time is
// up.
func opened(g lockcore.Gate, now time.Time) bool { return !g.Until.IsZero() && !now.Before(g.Until) }
