package redisengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// A key's result (lockcore.Results) is a string beside its lock, in its
// hash tag: "<prefix>{<key>}:k", holding "<entry>\n<result>", where entry
// is the attempt id of the hold that stored it (lua/release.lua). The
// entry lets a run of the same call that a client re-sent after a lost
// reply see that its own store landed.

// maxEntry bounds the length of an attempt id (an entry) with room to
// spare: "<Engine id>.<sequence>.<start>", each part a few dozen
// characters at most.
const maxEntry = 255

// resultKey returns the Redis key of key's result.
func (l *Engine) resultKey(key lockcore.Key) string {
	return l.opt.Prefix + "{" + key.String() + "}:k"
}

// Result implements lockcore.Results: it reads the result of key, waiting
// for Redis up to Options.Timeout. The read shares the pipelines of the
// Engine's other calls, as a crowd of duplicates asks at once.
func (l *Engine) Result(ctx context.Context, key lockcore.Key) ([]byte, bool, error) {
	if l.closed.Load() {
		return nil, false, lockcore.ErrClosed
	}
	sent := time.Now()
	c := newCall()
	c.ctx, c.sent, c.deadline = ctx, sent, sent.Add(l.opt.Timeout)
	get := redis.NewStringCmd(ctx, "get", l.resultKey(key))
	c.cmd = get
	switch l.batch.do(ctx, c) {
	case unsent:
		c.recycle()
		return nil, false, errors.Join(unavailable("result", errNoAnswer), ctx.Err())
	case abandoned:
		return nil, false, errors.Join(l.report(unavailable("result", errNoAnswer)), ctx.Err())
	}
	c.recycle()
	b, err := get.Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		// The call's own deadline, not the caller's: Redis did not answer.
		return nil, false, l.report(unavailable("result", errNoAnswer))
	case err != nil:
		return nil, false, l.report(unavailable("result", err))
	}
	l.answered()
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, false, fmt.Errorf("%w: the result of %s in Redis is not one this engine wrote", lockcore.ErrMisconfigured, resourceName(key))
	}
	return b[i+1:], true, nil
}

// DropResult implements lockcore.Results.
func (l *Engine) DropResult(ctx context.Context, key lockcore.Key) (bool, error) {
	if l.closed.Load() {
		return false, lockcore.ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opt.Timeout)
	defer cancel()
	n, err := l.rdb.Del(ctx, l.resultKey(key)).Result()
	if err != nil {
		return false, l.report(unavailable("drop result", err))
	}
	return n > 0, nil
}

// Keep implements lockcore.Results: it releases h and stores res as one
// call of the release script, which writes res only while h's entry holds
// the lock. It never hands h over in memory (Options.LocalHandOvers): the
// result must be in Redis before anybody holds the key again. With
// waiters in line it first tells each Engine with one, with the result
// when it is at most 4 KiB: those that want the result
// (lockcore.Request.Result) take it from the message, or ask again at
// once and find it. Then it hands the lock to the first in line, as
// Release does. A hold that
// was handed over to h in memory is kept once Redis has it (its pass
// call), waiting for that at most Options.ReleaseTimeout.
func (l *Engine) Keep(ctx context.Context, key lockcore.Key, t lockcore.Hold, res []byte, keep time.Duration) error {
	h, ok := t.(*hold)
	switch {
	case !ok || h.l != l:
		return fmt.Errorf("%w: redisengine.Engine.Keep of a hold this Engine did not take", lockcore.ErrMisconfigured)
	case h.key != key:
		return fmt.Errorf("%w: redisengine.Engine.Keep of a hold of another key", lockcore.ErrMisconfigured)
	case h.share != 0:
		return fmt.Errorf("%w: redisengine.Engine.Keep of a shared hold: results are kept by exclusive holders only", lockcore.ErrMisconfigured)
	case keep < time.Millisecond:
		return fmt.Errorf("%w: redisengine.Engine.Keep for %v: keep it a millisecond at least", lockcore.ErrMisconfigured, keep)
	}
	h.letGo()
	if h.pending != nil {
		switch h.settle(l.opt.ReleaseTimeout) {
		case passPending:
			h.l.bg.do(func() {
				<-h.pending
				_ = h.releaseUnpassed()
			})
			return l.report(unavailable("keep", errNoAnswer))
		case passGone:
			_ = h.releaseUnpassed()
			return errGone
		case passRevoked:
			_ = h.releaseUnpassed()
			return lockcore.ErrRevoked
		}
	}
	n, err := l.keep(ctx, h, key, res, keep)
	if err != nil {
		// Not answered in time: the call may not have run. It is sent
		// again in the background, with the result, as a failed release
		// is: a plain release would free the key without it, and a
		// duplicate waiting in line would run the request again. A run
		// after one that stored it changes nothing more.
		err = l.report(unavailable("keep", err))
		l.latch(h, err, func() error {
			_, err := l.keep(context.Background(), h, key, res, keep)
			return err
		})
		return err
	}
	switch {
	case n == -3:
		return lockcore.ErrRevoked
	case n < 0:
		// Not the hold's any more: its lease ran out in Redis, and maybe
		// another owner has the key.
		return errGone
	}
	return nil
}

// keep runs Keep's call of the release script for h once, waiting for the
// answer up to Options.ReleaseTimeout: its reply, or errNoAnswer or the
// call's error.
func (l *Engine) keep(ctx context.Context, h *hold, key lockcore.Key, res []byte, keep time.Duration) (int64, error) {
	sent := time.Now()
	c, a := l.newCall(ctx, h, "", sent, sent.Add(l.opt.ReleaseTimeout), 19)
	// Seven keys: the hold's three, its revoked entries, the shared
	// entries' two and the result's; then the release's arguments, the
	// result and how long to keep it.
	a[2], a[6], a[7], a[8], a[9] = 7, &h.keys[3], &h.keys[5], &h.keys[6], l.resultKey(key)
	a[10], a[11], a[12], a[13], a[14], a[15], a[16] = h.args[3], h.args[4], l.retArg, "", h.ch, l.claimArg, l.trustArg
	a[17], a[18] = res, ms(keep)
	c.keep, c.after = true, l.afterRelease
	c.cmd = l.run.cmd(ctx, releaseScript, a)
	if l.batch.do(context.Background(), c) != answered {
		return 0, errNoAnswer
	}
	n, err := c.n, c.cmd.Err()
	c.recycle()
	if err == nil {
		l.answered()
	}
	return n, err
}

// StoredResults implements lockcore.Results: it scans Redis (every master
// of a Cluster) for the results' keys, then reads their sizes and times
// to live in one pipeline per master, waiting for Redis up to
// Options.Timeout for each exchange.
func (l *Engine) StoredResults(ctx context.Context, prefix string, limit int) ([]lockcore.StoredResult, bool, error) {
	if l.closed.Load() {
		return nil, false, lockcore.ErrClosed
	}
	if limit <= 0 {
		return nil, false, fmt.Errorf("%w: redisengine.Engine.StoredResults: limit %d must be positive", lockcore.ErrMisconfigured, limit)
	}
	head := l.opt.Prefix + "{"
	pattern := globEscape(head) + globEscape(prefix) + "*}:k"
	var mu sync.Mutex
	var out []lockcore.StoredResult
	err := l.scan(ctx, pattern, func(ctx context.Context, c redis.Cmdable, names []string) error {
		var keys []lockcore.Key
		var found []string
		for _, name := range names {
			rest, ok := strings.CutPrefix(name, head)
			if k, ok2 := strings.CutSuffix(rest, "}:k"); ok && ok2 && strings.HasPrefix(k, prefix) {
				if key, err := lockcore.ParseKey(k); err == nil {
					keys, found = append(keys, key), append(found, name)
				}
			}
		}
		if len(found) == 0 {
			return nil
		}
		pctx, cancel := context.WithTimeout(ctx, l.opt.Timeout)
		defer cancel()
		p := c.Pipeline()
		sizes := make([]*redis.IntCmd, len(found))
		ttls := make([]*redis.DurationCmd, len(found))
		heads := make([]*redis.StringCmd, len(found)) // "<entry>\n", to leave out of the size
		for i, name := range found {
			sizes[i], ttls[i], heads[i] = p.StrLen(pctx, name), p.PTTL(pctx, name), p.GetRange(pctx, name, 0, maxEntry)
		}
		if _, err := p.Exec(pctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for i, k := range keys {
			size, ttl := sizes[i].Val(), ttls[i].Val()
			if size == 0 || ttl < 0 {
				continue // gone since the scan
			}
			if j := strings.IndexByte(heads[i].Val(), '\n'); j >= 0 {
				size -= int64(j) + 1
			}
			out = append(out, lockcore.StoredResult{Key: k, Size: size, Expires: now.Add(ttl)})
		}
		return nil
	})
	if err != nil {
		return nil, false, l.report(unavailable("stored results", err))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}
