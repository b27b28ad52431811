package quorumengine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

var _ lockcore.Operator = (*engine)(nil)

// newInstance returns a random engine id.
func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// owner is the digest operators see for an owner token.
func owner(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:6])
}

// view is one master's view of a lock (inspectScript).
type view struct {
	token        string
	fence        int64
	ttl          time.Duration
	entries      int
	instance     string
	name         string
	route, trace string
	since        time.Time
	counter      int64
	audit        []lockcore.Revocation
}

func readView(v any) view {
	a, _ := v.([]any)
	str := func(i int) string {
		if i < len(a) {
			switch x := a[i].(type) {
			case string:
				return x
			case int64:
				return strconv.FormatInt(x, 10)
			}
		}
		return ""
	}
	num := func(i int) int64 { n, _ := strconv.ParseInt(str(i), 10, 64); return n }
	w := view{token: str(0), fence: num(1), ttl: time.Duration(num(2)) * time.Millisecond, entries: int(num(3)),
		instance: str(4), name: str(5), route: str(6), trace: str(7), counter: num(9)}
	if ms := num(8); ms > 0 {
		w.since = time.UnixMilli(ms)
	}
	for i := 10; i < len(a); i++ {
		var rev lockcore.Revocation
		if json.Unmarshal([]byte(str(i)), &rev) == nil {
			w.audit = append(w.audit, rev)
		}
	}
	return w
}

// Inspect implements lockcore.Operator: a lock is held when a majority of
// the masters say so, by one owner; its fence is the one most of them
// have, its TTL the shortest of theirs.
func (e *engine) Inspect(ctx context.Context, key lockcore.Key) (lockcore.Info, error) {
	info, _, err := e.inspect(ctx, key)
	return info, err
}

// inspect is Inspect, and the holder's token ("" when free).
func (e *engine) inspect(ctx context.Context, key lockcore.Key) (lockcore.Info, string, error) {
	k := key.String()
	info := lockcore.Info{Key: k}
	deadline := time.Now().Add(e.opt.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	replies := e.call(deadline, inspectScript, []string{e.lockKey(k), e.countKey(k), e.auditKey(k)}, func(int) []any { return nil }, nil)
	var views []view
	var first error
	for _, g := range replies {
		if g.err != nil {
			if first == nil {
				first = g.err
			}
			continue
		}
		views = append(views, readView(g.v))
	}
	if len(views) < e.quorum {
		return info, "", fmt.Errorf("%w: inspect: %d of %d masters answered: %w", lockcore.ErrUnavailable, len(views), len(e.masters), first)
	}
	seen := map[string]bool{}
	for _, w := range views {
		info.LastFence = max(info.LastFence, w.counter)
		for _, rev := range w.audit {
			id := strconv.FormatInt(rev.Fence, 10) + "/" + strconv.FormatInt(rev.At.UnixNano(), 10)
			if !seen[id] {
				seen[id] = true
				info.Audit = append(info.Audit, rev)
			}
		}
	}
	slices.SortFunc(info.Audit, func(a, b lockcore.Revocation) int { return b.At.Compare(a.At) })
	byToken := map[string][]view{}
	for _, w := range views {
		if w.token != "" {
			byToken[w.token] = append(byToken[w.token], w)
		}
	}
	for tok, ws := range byToken {
		if len(ws) < e.quorum {
			continue
		}
		var fences []int64
		h := lockcore.Holder{Owner: owner(tok), Slot: -1, Route: ws[0].route, Trace: ws[0].trace, Since: ws[0].since}
		ttl := ws[0].ttl
		for _, w := range ws {
			fences = append(fences, w.fence)
			ttl = min(ttl, w.ttl)
			h.Count = max(h.Count, 1+w.entries)
			if w.instance != "" && !slices.Contains(h.Instances, w.instance) {
				h.Instances = append(h.Instances, w.instance)
				h.Names = append(h.Names, w.name)
			}
		}
		h.Fence = majority(fences)
		info.Holders, info.Fence, info.TTL = []lockcore.Holder{h}, h.Fence, max(ttl, 0)
		info.LastFence = max(info.LastFence, info.Fence)
		return info, tok, nil
	}
	return info, "", nil
}

// List implements lockcore.Operator: the locks whose key starts with
// prefix that a majority of the masters hold, in key order. It scans
// every master that answers.
func (e *engine) List(ctx context.Context, prefix string, limit int) ([]lockcore.Info, bool, error) {
	match := globEscaper.Replace(e.opt.Prefix+"{"+prefix) + "*}:l"
	found := map[string]bool{}
	answered := 0
	var first error
	for _, m := range e.masters {
		keys, err := scan(ctx, m, match, e.opt.Timeout)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		answered++
		for _, k := range keys {
			k = strings.TrimSuffix(strings.TrimPrefix(k, e.opt.Prefix+"{"), "}:l")
			found[k] = true
		}
	}
	if answered < e.quorum {
		return nil, false, fmt.Errorf("%w: list: %d of %d masters answered: %w", lockcore.ErrUnavailable, answered, len(e.masters), first)
	}
	keys := make([]string, 0, len(found))
	for k := range found {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []lockcore.Info
	for _, k := range keys {
		key, err := lockcore.ParseKey(k)
		if err != nil {
			continue // not a key of this engine's
		}
		info, err := e.Inspect(ctx, key)
		if err != nil {
			return nil, false, err
		}
		if len(info.Holders) == 0 {
			continue
		}
		if limit > 0 && len(out) == limit {
			return out, true, nil
		}
		out = append(out, info)
	}
	return out, false, nil
}

// scan returns the keys of one master that match match, within timeout.
func scan(ctx context.Context, m redis.UniversalClient, match string, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var keys []string
	var cursor uint64
	for range 10000 {
		ks, next, err := m.Scan(ctx, cursor, match, 1000).Result()
		if err != nil {
			return nil, err
		}
		keys = append(keys, ks...)
		if cursor = next; cursor == 0 {
			return keys, nil
		}
	}
	return keys, nil
}

// globEscaper escapes the characters that a SCAN MATCH pattern reads.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// markKeep is how long a revocation's mark is kept: longer than any hold
// of the revoked owner could be renewed without seeing it.
const markKeep = time.Hour

// Revoke implements lockcore.Operator: on every master it deletes the
// hold of the owner a majority names, marks the hold's fence revoked, so
// that its renewals end its leases with lockcore.ErrRevoked, raises the
// key's counter to the revocation's NewFence, above every fence the
// revoked hold could show, and keeps the audit record. It needs a quorum
// of masters to answer.
func (e *engine) Revoke(ctx context.Context, key lockcore.Key, reason string) (lockcore.Revocation, error) {
	if err := checkReason(reason); err != nil {
		return lockcore.Revocation{}, err
	}
	info, tok, err := e.inspect(ctx, key)
	if err != nil {
		return lockcore.Revocation{}, err
	}
	k := key.String()
	if tok == "" {
		return lockcore.Revocation{}, fmt.Errorf("%w: %s", lockcore.ErrNotHeld, k)
	}
	rev := lockcore.Revocation{Key: k, Owner: info.Holders[0].Owner, Fence: info.Fence, NewFence: max(info.LastFence, info.Fence) + 1, Reason: reason, At: time.Now()}
	b, _ := json.Marshal(rev)
	deadline := time.Now().Add(e.opt.Timeout)
	keys := []string{e.lockKey(k), e.countKey(k), e.auditKey(k), e.markKey(k, rev.Fence)}
	args := []any{tok, rev.NewFence, string(b), reason, markKeep.Milliseconds()}
	replies := e.call(deadline, revokeScript, keys, func(int) []any { return args }, nil)
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
		return lockcore.Revocation{}, fmt.Errorf("%w: revoke: %d of %d masters answered: %w", lockcore.ErrUnavailable, n, len(e.masters), first)
	}
	return rev, nil
}

// checkReason returns an error matching ErrInvalidReason for a reason
// that is empty, longer than 256 bytes, not UTF-8, or has control
// characters.
func checkReason(reason string) error {
	bad := reason == "" || len(reason) > 256 || !utf8.ValidString(reason) ||
		strings.IndexFunc(reason, unicode.IsControl) >= 0
	if bad {
		return fmt.Errorf("%w: %q", lockcore.ErrInvalidReason, reason)
	}
	return nil
}
