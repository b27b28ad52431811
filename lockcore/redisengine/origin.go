package redisengine

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// Each Engine keeps a record of itself in Redis, for operators: a hash
// "<Prefix>engine:<engine id>" with the field "name" (Options.Name), and
// one field per attempt id of its holds and waiters that have lasted
// recordEvery, "<route>\n<trace>" (Policy.Route, Policy.Trace). It is
// written off the acquisition's path, by a goroutine of the Engine that
// starts with its first acquisition: every recordEvery it writes what
// changed since its last write, in one MULTI (HSET of the fields added,
// HDEL of those gone, PEXPIRE), so that its cost follows the churn of
// holds, not their number; while the Engine has such a hold or waiter, it
// renews the record's expiry at least every recordRefresh, and writes the
// whole record again when it finds it gone (expired, or lost with Redis's
// data). Once they are gone the record keeps the name alone, left to
// expire. An Engine whose holds and waits are all shorter writes nothing.
// The record expires recordTTL after it was last written, or the longest
// lease it shows and recordRefresh after, if later. Inspect and List read
// the records of the engines their locks name, in one more round trip.

// recordRefresh is how often an Engine rewrites its record when nothing
// changed; recordTTL how long the record outlives the last write.
const (
	recordRefresh = 30 * time.Second
	recordTTL     = 3 * recordRefresh
)

// maxName is the longest Options.Name; maxTrace the most of a
// Policy.Trace that is kept.
const (
	maxName  = 128
	maxTrace = 64
)

// defaultName is the Options.Name of an Engine that is given none:
// "<hostname>-<pid>".
func defaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	pid := "-" + strconv.Itoa(os.Getpid())
	if len(host)+len(pid) > maxName { // a long host name: cut, never refused
		host = strings.ToValidUTF8(host[:maxName-len(pid)], "")
	}
	return host + pid
}

// checkName reports what is wrong with an Options.Name.
func checkName(name string) error {
	if len(name) > maxName || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
		return fmt.Errorf("routelock: redisengine.Options.Name %q: at most %d bytes of UTF-8 without control characters", name, maxName)
	}
	return nil
}

// setOrigin notes on h the route and trace id of its acquisition, for
// the Engine's record and its log lines: no allocation, unless a trace id
// of more than maxTrace bytes is cut.
func (h *hold) setOrigin(route, trace string) {
	h.route, h.trace = route, trace
	if len(h.trace) > maxTrace {
		h.trace = strings.ToValidUTF8(h.trace[:maxTrace], "") // no rune cut in two
	}
}

// origin returns what the Engine's record keeps of h: "<route>\n<trace>",
// "" for neither.
func (h *hold) origin() string {
	if h.route == "" && h.trace == "" {
		return ""
	}
	return strings.ReplaceAll(h.route, "\n", " ") + "\n" + h.trace
}

// splitOrigin is the inverse of hold.origin.
func splitOrigin(v string) (route, trace string) {
	route, trace, _ = strings.Cut(v, "\n")
	return route, trace
}

// instanceRecord is the Engine's record's state: the acquisitions waiting
// behind another owner's hold, and what was last written.
type instanceRecord struct {
	mu      sync.Mutex
	waiting map[*hold]time.Time // queued waiters, and since when they wait

	// Under writing, one write at a time.
	writing sync.Mutex
	written map[string]string // the fields in Redis: attempt id to origin; nil before the first write
	shown   map[string]string // the fields due, gathered anew at each write (kept to reuse its memory)
	at      time.Time         // when the record's expiry was last set
	refused bool              // a write was refused as misconfigured, and logged
}

// recordKey is the Redis key of the record of the engine with id.
func (l *Engine) recordKey(id string) string { return l.opt.Prefix + "engine:" + id }

// recordEvery is how often the record is brought up to date: a third of
// the TTL, between 100ms and a second. A hold or waiter is shown once it
// lasted that long.
func (l *Engine) recordEvery() time.Duration {
	return min(max(l.opt.TTL/3, 100*time.Millisecond), time.Second)
}

// waits notes that h waits behind another owner's hold; the returned func
// notes that it no longer does.
func (l *Engine) waits(h *hold) func() {
	r := &l.rec
	r.mu.Lock()
	if r.waiting == nil {
		r.waiting = make(map[*hold]time.Time)
	}
	r.waiting[h] = time.Now()
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.waiting, h)
		r.mu.Unlock()
	}
}

// record writes what changed in the Engine's record, and renews its
// expiry when due.
func (l *Engine) record() {
	r := &l.rec
	r.writing.Lock()
	defer r.writing.Unlock()
	now := time.Now()
	old := now.Add(-l.recordEvery())
	// The holds and waiters that lasted recordEvery, gathered under the
	// mutexes; their entries, routes and trace ids do not change. The
	// record outlives the leases it shows: an operator looks for the
	// holder of a lock whose engine died, until the lock runs out.
	if r.shown == nil {
		r.shown = make(map[string]string)
	}
	clear(r.shown)
	ttl := recordTTL
	show := func(h *hold) {
		if o := h.origin(); o != "" {
			r.shown[h.entry] = o
			ttl = max(ttl, h.ttl+recordRefresh)
		}
	}
	l.wd.mu.Lock()
	for _, h := range l.wd.holds {
		if !h.start.IsZero() && h.start.Before(old) && !h.ended.Load() {
			show(h)
		}
	}
	l.wd.mu.Unlock()
	r.mu.Lock()
	for h, since := range r.waiting {
		if since.Before(old) {
			show(h)
		}
	}
	r.mu.Unlock()

	whole := r.written == nil // nothing written yet, or the record was found gone
	if whole && len(r.shown) == 0 && r.at.IsZero() {
		return // nothing to show yet
	}
	var set []any
	var gone []string
	for id, o := range r.shown {
		if w, ok := r.written[id]; !ok || w != o {
			set = append(set, id, o)
		}
	}
	if whole || len(set) > 0 {
		// The name goes with every write: a record found gone, written
		// anew by this write's fields, has it at once.
		set = append(set, "name", l.opt.Name)
	}
	for id := range r.written {
		if _, ok := r.shown[id]; !ok {
			gone = append(gone, id)
		}
	}
	due := len(r.shown) > 0 && now.Sub(r.at) >= recordRefresh
	if len(set) == 0 && len(gone) == 0 && !due {
		return // up to date, or left to expire
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.opt.Timeout)
	defer cancel()
	key := l.recordKey(l.id)
	var there *redis.IntCmd
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if whole {
			p.Del(ctx, key)
		} else {
			there = p.Exists(ctx, key)
		}
		if len(set) > 0 {
			p.HSet(ctx, key, set...)
		}
		if len(gone) > 0 {
			p.HDel(ctx, key, gone...)
		}
		p.PExpire(ctx, key, ttl)
		return nil
	})
	switch {
	case err == nil && there != nil && there.Val() == 0:
		// The record was gone (expired, or lost with Redis's data): it holds
		// only what was just written, so it is written whole next time.
		r.written, r.at = nil, time.Time{}
	case err == nil:
		if r.written == nil {
			r.written = make(map[string]string, len(r.shown))
		}
		for _, id := range gone {
			delete(r.written, id)
		}
		for id, o := range r.shown {
			r.written[id] = o
		}
		r.at = now
	case misconfigured(err) && !r.refused && l.opt.Logger != nil:
		// An ACL or a proxy that refuses MULTI, HSET, PEXPIRE: said once.
		r.refused = true
		l.opt.Logger.Warn("routelock: the engine's record for operators cannot be written: the admin page and the command show its id, not its name, routes and trace ids",
			"instance", l.opt.Name, "err", err)
	}
}

// startRecords starts the goroutine that keeps the Engine's record. It
// runs once, with the Engine's first acquisition.
func (l *Engine) startRecords() {
	l.bg.add()
	go l.every(l.recordEvery(), l.record)
}

// refs are the attempt ids behind an Info: each holder's, in its
// Instances' order of first appearance, and each waiter's.
type refs struct {
	holders [][]string
	waiters []string
}

// describe fills in the instance names, routes and trace ids of infos,
// whose attempt ids are rs, from the records of their engines, in one
// round trip. A record that cannot be read leaves them empty.
func (l *Engine) describe(ctx context.Context, infos []lockcore.Info, rs []refs) {
	want := map[string][]string{} // engine id -> attempt ids
	add := func(id string) {
		e := engineOf(id)
		if !slices.Contains(want[e], id) {
			want[e] = append(want[e], id)
		}
	}
	for _, r := range rs {
		for _, ids := range r.holders {
			for _, id := range ids {
				add(id)
			}
		}
		for _, id := range r.waiters {
			add(id)
		}
	}
	if len(want) == 0 {
		return
	}
	p := l.rdb.Pipeline()
	cmds := make(map[string]*redis.SliceCmd, len(want))
	for e, ids := range want {
		args := append([]string{"name"}, ids...)
		cmds[e] = p.HMGet(ctx, l.recordKey(e), args...)
	}
	_, _ = p.Exec(ctx)
	names := map[string]string{}
	origins := map[string]string{}
	for e, c := range cmds {
		vs, err := c.Result()
		if err != nil || len(vs) != len(want[e])+1 {
			continue
		}
		if s, ok := vs[0].(string); ok {
			names[e] = s
		}
		for i, id := range want[e] {
			if s, ok := vs[i+1].(string); ok {
				origins[id] = s
			}
		}
	}
	for i := range infos {
		in, r := &infos[i], rs[i]
		for j := range in.Holders {
			h := &in.Holders[j]
			h.Names = make([]string, len(h.Instances))
			for k, e := range h.Instances {
				h.Names[k] = names[e]
			}
			if j < len(r.holders) {
				for _, id := range r.holders[j] {
					if o, ok := origins[id]; ok {
						h.Route, h.Trace = splitOrigin(o)
						break
					}
				}
			}
		}
		for j := range in.Waiters {
			w := &in.Waiters[j]
			w.Name = names[w.Instance]
			if j < len(r.waiters) {
				if o, ok := origins[r.waiters[j]]; ok {
					w.Route, w.Trace = splitOrigin(o)
				}
			}
		}
	}
}
