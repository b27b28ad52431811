package redisengine

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// Info describes a key's lock state in Redis, as read by Inspect.
type Info struct {
	// Holders maps each holding owner token to its hold count. Empty when
	// the lock is free. Tokens are secrets of their requests: do not log them.
	Holders map[string]int64
	// TTL is the remaining lease time; 0 when the lock is free.
	TTL time.Duration
	// Fence is the fencing token of the current hold, 0 when free.
	Fence int64
	// LastFence is the key's fencing counter: no token issued for the key
	// is above it. 0 if none is remembered (see Options.FenceRetention).
	LastFence int64
	// Waiters is the number of queued waiters.
	Waiters int64
}

// Held reports whether anyone holds the lock.
func (i Info) Held() bool { return len(i.Holders) > 0 }

// Inspect reads the lock state of key in one round trip. It is meant for
// tests, debugging and operations tools; the state may change at once.
func (l *Engine) Inspect(ctx context.Context, key lockcore.Key) (Info, error) {
	if key.IsZero() {
		return Info{}, lockcore.ErrInvalidKey
	}
	ks := l.redisKeys(key)
	p := l.rdb.Pipeline()
	hold := p.Get(ctx, ks[0])
	pttl := p.PTTL(ctx, ks[0])
	last := p.Get(ctx, ks[2])
	n := p.ZCard(ctx, ks[1])
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Info{}, unavailable("inspect", err)
	}
	info := Info{Holders: map[string]int64{}, Waiters: n.Val()}
	if tok, fence, n, ok := parseHold(hold.Val()); ok {
		info.Holders[tok] = int64(n) // one count per entry
		info.Fence = fence
	}
	if d := pttl.Val(); d > 0 {
		info.TTL = d
	}
	if s, err := last.Result(); err == nil {
		info.LastFence, _ = strconv.ParseInt(s, 10, 64)
	}
	return info, nil
}
