package redisengine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/lockcore"
)

// The Engine is an Operator: it shows its locks and force-releases them.
var (
	_ lockcore.Operator       = (*Engine)(nil)
	_ lockcore.RestartGuarder = (*Engine)(nil)
)

// auditShown is how many of a key's latest revocations Inspect and List
// return.
const auditShown = 10

// Inspect implements lockcore.Operator: it reads the state of the lock on
// key in one round trip (not atomically: the lock may change meanwhile).
// For a lock that is free and awaited by nobody, Holders and Waiters are
// empty, and Fence and TTL 0; LastFence and Audit say what Redis still
// remembers of the key. Nothing in the Info contains an owner token.
func (l *Engine) Inspect(ctx context.Context, key lockcore.Key) (lockcore.Info, error) {
	if key == (lockcore.Key{}) {
		return lockcore.Info{}, fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey)
	}
	p := l.rdb.Pipeline()
	r := readState(ctx, p, l.redisKeys(key))
	_, _ = p.Exec(ctx)
	info, rs, err := r.info(key.String())
	if err != nil {
		return lockcore.Info{}, unavailable("inspect", err)
	}
	infos := []lockcore.Info{info}
	l.describe(ctx, infos, []refs{rs})
	return infos[0], nil
}

// stateRead is the commands that read one lock's state, queued in a
// pipeline.
type stateRead struct {
	hold   *redis.StringCmd
	shared *redis.MapStringStringCmd // the shared holds' fields
	ends   *redis.ZSliceCmd          // when each shared hold's lease ends
	now    *redis.TimeCmd            // the server's clock, which ends is on
	pttl   *redis.DurationCmd
	fence  *redis.StringCmd
	queue  *redis.ZSliceCmd
	audit  *redis.XMessageSliceCmd
}

// readState queues in p the reads of the lock whose Redis keys are ks
// (see redisKeys).
func readState(ctx context.Context, p redis.Pipeliner, ks [7]string) stateRead {
	return stateRead{
		hold:   p.Get(ctx, ks[0]),
		shared: p.HGetAll(ctx, ks[6]),
		ends:   p.ZRangeWithScores(ctx, ks[5], 0, -1),
		now:    p.Time(ctx),
		pttl:   p.PTTL(ctx, ks[0]),
		fence:  p.Get(ctx, ks[2]),
		queue:  p.ZRangeWithScores(ctx, ks[1], 0, -1),
		audit:  p.XRevRangeN(ctx, ks[4], "+", "-", auditShown),
	}
}

// info returns the state that r read of the lock on key (escaped), and
// the attempt ids of its holders and waiters, or the first error of its
// commands.
func (r stateRead) info(key string) (lockcore.Info, refs, error) {
	var rs refs
	for _, c := range []redis.Cmder{r.hold, r.shared, r.ends, r.now, r.pttl, r.fence, r.queue, r.audit} {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return lockcore.Info{}, rs, err
		}
	}
	info := lockcore.Info{Key: key}
	if h, ok := parseHold(r.hold.Val()); ok {
		rs.holders = [][]string{h.entries}
		info.Holders = []lockcore.Holder{{
			Owner:     operate.OwnerDigest(h.token),
			Count:     len(h.entries),
			Instances: instances(h.entries),
			Since:     unixMicro(h.since),
			Fence:     h.fence,
			Slot:      -1,
		}}
		info.Fence = h.fence
		if d := r.pttl.Val(); d > 0 {
			info.TTL = d
		}
	} else if r.hold.Val() == sharedMark {
		info.Holders, rs.holders = sharedHolders(r.shared.Val(), r.ends.Val(), r.now.Val().UnixMilli())
		for _, h := range info.Holders {
			info.Fence = max(info.Fence, h.Fence)
		}
		if d := r.pttl.Val(); d > 0 && len(info.Holders) > 0 {
			info.TTL = d
		}
	}
	if s, err := r.fence.Result(); err == nil {
		info.LastFence, _ = parseFence(s)
	}
	for _, z := range r.queue.Val() {
		if w, id, ok := parseWaiter(z); ok {
			info.Waiters = append(info.Waiters, w)
			rs.waiters = append(rs.waiters, id)
		}
	}
	for _, m := range r.audit.Val() {
		info.Audit = append(info.Audit, parseAudit(key, m))
	}
	return info, rs, nil
}

// sharedMark is the hold of a lock held shared (see lua/common.lua).
const sharedMark = "~"

// sharedHolders returns the holders of a lock held shared: one per owner
// token, from the fields of each entry ("<share> <slot> <fence> <since>
// <token>", see lua/common.lua) whose lease in ends had not ended at
// nowMS (the server's clock), in slot order, and each one's attempt ids.
func sharedHolders(fields map[string]string, ends []redis.Z, nowMS int64) ([]lockcore.Holder, [][]string) {
	live := make(map[string]bool, len(ends))
	for _, z := range ends {
		if id, ok := z.Member.(string); ok && z.Score > float64(nowMS) {
			live[id] = true
		}
	}
	byToken := map[string]int{}
	var out []lockcore.Holder
	var ids [][]string
	for _, id := range slices.Sorted(maps.Keys(fields)) {
		f := strings.Fields(fields[id])
		if len(f) != 5 || !live[id] {
			continue
		}
		share, err1 := strconv.Atoi(f[0])
		slot, err2 := strconv.Atoi(f[1])
		fence, err3 := strconv.ParseInt(f[2], 10, 64)
		since, err4 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			continue
		}
		i, seen := byToken[f[4]]
		if !seen {
			i = len(out)
			byToken[f[4]] = i
			out = append(out, lockcore.Holder{
				Owner: operate.OwnerDigest(f[4]), Since: unixMicro(since),
				Fence: fence, Share: share, Slot: slot,
			})
			ids = append(ids, nil)
		}
		ids[i] = append(ids[i], id)
		out[i].Count++
		if e := engineOf(id); !slices.Contains(out[i].Instances, e) {
			out[i].Instances = append(out[i].Instances, e)
		}
	}
	order := make([]int, len(out))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(out[a].Slot, out[b].Slot) })
	sorted, sortedIDs := make([]lockcore.Holder, len(out)), make([][]string, len(out))
	for i, j := range order {
		sorted[i], sortedIDs[i] = out[j], ids[j]
	}
	return sorted, sortedIDs
}

// engineOf returns the Engine id in attempt id "<engine id>.<seq>".
func engineOf(id string) string {
	e, _, _ := strings.Cut(id, ".")
	return e
}

// instances returns the Engine ids of entries, each once, in order.
func instances(entries []string) []string {
	out := make([]string, 0, 1)
	for _, e := range entries {
		if id := engineOf(e); !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// unixMicro returns the time us microseconds after the epoch; zero for 0.
func unixMicro(us int64) time.Time {
	if us <= 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

// parked is what the scripts add to the score of a waiter parked behind
// the others (PARKED in lua/common.lua).
const parked = 4_000_000_000_000_000

// parseWaiter reads a member of the wait queue, scored by when it queued
// (see lua/common.lua): "<deadline ms> <ttl ms> <channel> <attempt id>
// <token>", and " <share>" for a shared acquisition, and returns the
// waiter and its attempt id. The token stays where it is.
func parseWaiter(z redis.Z) (lockcore.Waiter, string, bool) {
	m, ok := z.Member.(string)
	if !ok {
		return lockcore.Waiter{}, "", false
	}
	f := strings.Fields(m)
	if len(f) != 5 && len(f) != 6 {
		return lockcore.Waiter{}, "", false
	}
	dl, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return lockcore.Waiter{}, "", false
	}
	share := 0
	if len(f) == 6 {
		if share, err = strconv.Atoi(f[5]); err != nil {
			return lockcore.Waiter{}, "", false
		}
	}
	since := int64(z.Score)
	if since >= parked {
		since -= parked // parked behind the others (see grant_next)
	}
	return lockcore.Waiter{
		Instance: engineOf(f[3]),
		Since:    unixMicro(since),
		Deadline: time.UnixMilli(dl),
		Share:    share,
	}, f[3], true
}

// parseAudit reads an audit record of the lock on key (see lua/revoke.lua).
func parseAudit(key string, m redis.XMessage) lockcore.Revocation {
	str := func(name string) string {
		s, _ := m.Values[name].(string)
		return s
	}
	num := func(name string) int64 {
		n, _ := strconv.ParseInt(str(name), 10, 64)
		return n
	}
	return lockcore.Revocation{
		Key:      key,
		Owner:    str("owner"),
		Fence:    num("fence"),
		NewFence: num("new"),
		Reason:   str("reason"),
		At:       unixMicro(num("at")),
	}
}

// listScanCount is the COUNT of List's SCANs: how many keys Redis looks at
// per call.
const listScanCount = 500

// listReadBatch is how many locks List reads per round trip.
const listReadBatch = 256

// List implements lockcore.Operator: it returns the held or awaited locks
// whose escaped key starts with prefix, in key order, at most limit of
// them (limit <= 0: all), and whether there were more. It scans the
// engine's keys on every master (one server, or each master of a Cluster)
// with SCAN, which does not block Redis, and then reads the locks it found
// in pipelines of listReadBatch. It holds every matching key name in
// memory while it sorts them; locks may come and go while it runs.
func (l *Engine) List(ctx context.Context, prefix string, limit int) ([]lockcore.Info, bool, error) {
	keys, err := l.scanKeys(ctx, prefix)
	if err != nil {
		return nil, false, unavailable("list", err)
	}
	slices.Sort(keys)
	var out []lockcore.Info
	var rs []refs
	for len(keys) > 0 && (limit <= 0 || len(out) <= limit) {
		n := min(len(keys), listReadBatch)
		if limit > 0 {
			n = min(n, limit+1-len(out))
		}
		batch := keys[:n]
		keys = keys[n:]
		p := l.rdb.Pipeline()
		reads := make([]stateRead, len(batch))
		for i, k := range batch {
			reads[i] = readState(ctx, p, l.keysOf(k))
		}
		_, _ = p.Exec(ctx)
		for i, r := range reads {
			info, ir, err := r.info(batch[i])
			if err != nil {
				return nil, false, unavailable("list", err)
			}
			if (len(info.Holders) > 0) || len(info.Waiters) > 0 {
				out = append(out, info)
				rs = append(rs, ir)
			}
		}
	}
	more := false
	if limit > 0 && len(out) > limit {
		out, rs, more = out[:limit], rs[:limit], true
	}
	l.describe(ctx, out, rs)
	return out, more, nil
}

// scanKeys returns, once each, the escaped keys starting with prefix of
// the locks that have a hold or a wait queue in Redis.
func (l *Engine) scanKeys(ctx context.Context, prefix string) ([]string, error) {
	head := l.opt.Prefix + "{"
	var mu sync.Mutex
	seen := map[string]struct{}{}
	err := l.scan(ctx, globEscape(head)+globEscape(prefix)+"*", func(_ context.Context, _ redis.Cmdable, names []string) error {
		mu.Lock()
		defer mu.Unlock()
		for _, name := range names {
			if k, ok := lockOf(name, head, prefix); ok {
				seen[k] = struct{}{}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	return keys, nil
}

// scan runs SCAN with pattern on the server, or on every master of a
// Cluster, and calls f with each batch of names found and the server they
// are on; f runs concurrently for the masters of a Cluster.
func (l *Engine) scan(ctx context.Context, pattern string, f func(ctx context.Context, c redis.Cmdable, names []string) error) error {
	each := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			names, next, err := c.Scan(ctx, cursor, pattern, listScanCount).Result()
			if err != nil {
				return err
			}
			if err := f(ctx, c, names); err != nil {
				return err
			}
			if next == 0 {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			cursor = next
		}
	}
	if c, ok := l.rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return each(ctx, c) })
	}
	return each(ctx, l.rdb)
}

// lockOf returns the escaped key of the lock whose hold or wait queue is
// the Redis key name, when it starts with prefix; false for the lock's
// other keys, and for names that are not an engine's (such a key, even if
// it matched the SCAN pattern, does not parse as a lockcore.Key).
func lockOf(name, head, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(name, head)
	if !ok {
		return "", false
	}
	i := strings.IndexByte(rest, '}')
	if i < 0 {
		return "", false
	}
	key, suffix := rest[:i], rest[i+1:]
	if suffix != "" && suffix != ":q" || !strings.HasPrefix(key, prefix) {
		return "", false
	}
	if _, err := lockcore.ParseKey(key); err != nil {
		return "", false
	}
	return key, true
}

// globEscape escapes the characters that SCAN's MATCH pattern reads.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
