// Package bench measures routelock's lock engine beside other Go Redis lock
// libraries, in one process or several, against one real Redis.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// Mutexer is one "process" worth of a lock library: its clients and state.
type Mutexer interface {
	// Lock takes key, waiting while ctx allows when wait is set, and returns
	// the function that releases it.
	Lock(ctx context.Context, key string, wait bool) (unlock func(), err error)
	Close()
}

// Lib is a lock library under test, with one configuration.
type Lib struct {
	Name string
	Note string // configuration, for the report
	// New builds one instance on the Redis of t. Commands sent are added
	// to cmds.
	New func(t Target, cmds *atomic.Int64) (Mutexer, error)
	// Only, when set, names the one kind of deployment (Single, or
	// Replicated: a Cluster or Sentinel, whose masters have replicas) the
	// configuration runs on.
	Only string
	// Floor marks an entry that is not a lock between processes but the
	// least work a Redis-mediated hand-over can do; it runs only where all
	// goroutines share one process and wait for each other (W2 in one
	// process).
	Floor bool
}

// Replicated is a Lib.Only: a Cluster or a Sentinel set-up.
const Replicated = "replicated"

// RunsOn reports whether l runs on deployment (Single, Cluster or
// Sentinel).
func (l Lib) RunsOn(deployment string) bool {
	switch l.Only {
	case Single:
		return deployment == Single
	case Replicated:
		return deployment != Single
	}
	return true
}

// TTL is the lease length every library gets.
const TTL = 10 * time.Second

// Libs returns the libraries and configurations compared.
func Libs() []Lib {
	return []Lib{
		{Name: "routelock", Note: "defaults: hand-over in memory to a waiter of the same Engine (up to 8 in a row), else FIFO in Redis with pub/sub wake-up; reentrancy, fencing, watchdog on; go-redis defaults",
			New: func(t Target, c *atomic.Int64) (Mutexer, error) {
				return newRoutelock(t, c, false, redisengine.Options{})
			}},
		{Name: "routelock-ctxdl", Note: "routelock on a client with ContextTimeoutEnabled: calls fly in the caller's goroutine",
			New: func(t Target, c *atomic.Int64) (Mutexer, error) {
				return newRoutelock(t, c, true, redisengine.Options{})
			}},
		{Name: "routelock-queue", Note: "routelock with Options.LocalHandOvers -1: every hand-over through Redis, FIFO, pub/sub wake-up; go-redis defaults",
			New: func(t Target, c *atomic.Int64) (Mutexer, error) {
				return newRoutelock(t, c, false, redisengine.Options{LocalHandOvers: -1})
			}},
		{Name: "routelock-replicas1", Note: "routelock with Options.Replicas 1: every acquisition waits for a replica's acknowledgement (WAIT); go-redis defaults",
			New: func(t Target, c *atomic.Int64) (Mutexer, error) {
				return newRoutelock(t, c, false, redisengine.Options{Replicas: 1})
			}, Only: Replicated},
		{Name: "routelock-etcd1", Note: "routelock's etcd engine on one etcd member, no fsync (UnsafeNoFsync); FIFO by create revision, each waiter watching its predecessor; cmds counts unary etcd requests",
			New: func(_ Target, c *atomic.Int64) (Mutexer, error) { return newEtcd(etcd1, c) }, Only: Single},
		{Name: "routelock-etcd1-fsync", Note: "routelock's etcd engine on one etcd member that fsyncs its log (etcd's default)",
			New: func(_ Target, c *atomic.Int64) (Mutexer, error) { return newEtcd(etcd1Fsync, c) }, Only: Single},
		{Name: "routelock-etcd3", Note: "routelock's etcd engine on three etcd members, no fsync; the client knows all three",
			New: func(_ Target, c *atomic.Int64) (Mutexer, error) { return newEtcd(etcd3, c) }, Only: Single},
		{Name: "routelock-etcd3-fsync", Note: "routelock's etcd engine on three etcd members that fsync (etcd's default)",
			New: func(_ Target, c *atomic.Int64) (Mutexer, error) { return newEtcd(etcd3Fsync, c) }, Only: Single},
		{Name: "routelock-quorum3", Note: "routelock's quorum engine on three independent redis-servers (a hold on a majority); waiters poll with jitter; go-redis defaults",
			New: func(_ Target, c *atomic.Int64) (Mutexer, error) { return newQuorum(quorum3, c) }, Only: Single},
		{Name: "raw-1ms", Note: "SET NX PX + Lua delete, polling every 1 ms",
			New: func(t Target, c *atomic.Int64) (Mutexer, error) { return newRaw(t, c, time.Millisecond) }},
		{Name: "redislock-1ms", Note: "bsm/redislock, LinearBackoff(1ms) (tuned)",
			New: func(t Target, c *atomic.Int64) (Mutexer, error) { return newRedislock(t, c, time.Millisecond) }},
		{Name: "redislock-100ms", Note: "bsm/redislock, LinearBackoff(100ms) as in its README",
			New: func(t Target, c *atomic.Int64) (Mutexer, error) { return newRedislock(t, c, 100*time.Millisecond) }},
		{Name: "redsync", Note: "go-redsync/redsync/v4, 1 pool, defaults (32 tries, 50-250 ms delay)",
			New: func(t Target, c *atomic.Int64) (Mutexer, error) { return newRedsync(t, c, 1, false) }},
		{Name: "redsync-1ms", Note: "redsync, 1 pool, 1 ms retry delay, unlimited tries (tuned)",
			New: func(t Target, c *atomic.Int64) (Mutexer, error) { return newRedsync(t, c, 1, true) }},
		{Name: "redsync3-1ms", Note: "redsync Redlock over 3 pools (DBs 0-2 of the one server), 1 ms retry",
			New: func(t Target, c *atomic.Int64) (Mutexer, error) { return newRedsync(t, c, 3, true) }, Only: Single},
		{Name: "rueidislock", Note: "redis/rueidis/rueidislock, KeyMajority 1, NoLoopTracking, wakes by client-side-cache invalidation",
			New: newRueidislock},
		{Name: "floor-publish", Note: "not a lock: waiters queue in memory, each hand-over is one PUBLISH read by a shared subscription (the ceiling of a hand-over through Redis)",
			New: newFloor, Floor: true},
	}
}

// LibByName finds a library configuration.
func LibByName(name string) (Lib, error) {
	for _, l := range Libs() {
		if l.Name == name {
			return l, nil
		}
	}
	return Lib{}, fmt.Errorf("unknown library %q", name)
}

// ErrBusy is what Lock returns when a fail-fast attempt found the key taken.
var ErrBusy = errors.New("bench: lock busy")

// countHook counts the commands a go-redis client sends, leaving out the
// handshake of new connections.
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "hello" && name != "client" && name != "select" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if name := cmd.Name(); name != "hello" && name != "client" && name != "select" {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// --- routelock

type routelock struct {
	close func()           // closes the engine, then its client
	lk    lifecycle.Locker // the leases of the engine's holds, as lock.FromEngine makes them
}

// newRoutelock is routelock on a client at go-redis's defaults, or, with
// ctxDeadlines, on one with ContextTimeoutEnabled, with options opt (its
// Prefix and TTL set here).
func newRoutelock(t Target, cmds *atomic.Int64, ctxDeadlines bool, opt redisengine.Options) (Mutexer, error) {
	rdb, err := t.Client(0, ctxDeadlines, cmds)
	if err != nil {
		return nil, err
	}
	opt.Prefix, opt.TTL = "bench:rl:", TTL
	l, err := redisengine.New(rdb, opt)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &routelock{close: func() { _ = l.Close(); _ = rdb.Close() }, lk: lifecycle.Serve(l, nil)}, nil
}

func (r *routelock) Lock(ctx context.Context, key string, wait bool) (func(), error) {
	k, err := lockcore.NewKey(key)
	if err != nil {
		return nil, err
	}
	p := lifecycle.Policy{Wait: lockcore.FailFast}
	if wait {
		p.Wait = time.Hour // bounded by ctx
	}
	ls, err := r.lk.Acquire(ctx, k, p)
	if err != nil {
		if errors.Is(err, lockcore.ErrNotAcquired) && !wait {
			return nil, ErrBusy
		}
		return nil, err
	}
	return func() { _ = ls.Release(context.Background()) }, nil
}

func (r *routelock) Close() { r.close() }

// --- raw: SET NX PX + Lua compare-and-delete

var rawDel = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

type raw struct {
	rdb   redis.UniversalClient
	retry time.Duration
}

func newRaw(t Target, cmds *atomic.Int64, retry time.Duration) (Mutexer, error) {
	rdb, err := t.Client(0, false, cmds)
	if err != nil {
		return nil, err
	}
	return &raw{rdb: rdb, retry: retry}, nil
}

func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (r *raw) Lock(ctx context.Context, key string, wait bool) (func(), error) {
	key = "bench:raw:" + key
	tok := token()
	var t *time.Timer
	for {
		ok, err := r.rdb.SetNX(ctx, key, tok, TTL).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func() { _ = rawDel.Run(context.Background(), r.rdb, []string{key}, tok).Err() }, nil
		}
		if !wait {
			return nil, ErrBusy
		}
		if t == nil {
			t = time.NewTimer(r.retry)
			defer t.Stop()
		} else {
			t.Reset(r.retry)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (r *raw) Close() { _ = r.rdb.Close() }

// --- bsm/redislock

type bsm struct {
	rdb   redis.UniversalClient
	c     *redislock.Client
	retry time.Duration
}

func newRedislock(t Target, cmds *atomic.Int64, retry time.Duration) (Mutexer, error) {
	rdb, err := t.Client(0, false, cmds)
	if err != nil {
		return nil, err
	}
	return &bsm{rdb: rdb, c: redislock.New(rdb), retry: retry}, nil
}

func (b *bsm) Lock(ctx context.Context, key string, wait bool) (func(), error) {
	opt := &redislock.Options{}
	if wait {
		opt.RetryStrategy = redislock.LinearBackoff(b.retry)
	}
	l, err := b.c.Obtain(ctx, "bench:bsm:"+key, TTL, opt)
	if err != nil {
		if errors.Is(err, redislock.ErrNotObtained) && !wait {
			return nil, ErrBusy
		}
		return nil, err
	}
	return func() { _ = l.Release(context.Background()) }, nil
}

func (b *bsm) Close() { _ = b.rdb.Close() }

// --- go-redsync

type rsync struct {
	rdbs []redis.UniversalClient
	rs   *redsync.Redsync
	opts []redsync.Option
}

func newRedsync(t Target, cmds *atomic.Int64, pools int, tuned bool) (Mutexer, error) {
	r := &rsync{}
	var ps []redsyncredis.Pool
	for db := range pools {
		c, err := t.Client(db, false, cmds)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.rdbs = append(r.rdbs, c)
		ps = append(ps, goredis.NewPool(c))
	}
	r.rs = redsync.New(ps...)
	r.opts = []redsync.Option{redsync.WithExpiry(TTL)}
	if tuned {
		r.opts = append(r.opts, redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(1<<30))
	}
	return r, nil
}

func (r *rsync) Lock(ctx context.Context, key string, wait bool) (func(), error) {
	opts := r.opts
	if !wait {
		opts = append(opts[:len(opts):len(opts)], redsync.WithTries(1))
	}
	m := r.rs.NewMutex("bench:rs:"+key, opts...)
	if err := m.LockContext(ctx); err != nil {
		var taken *redsync.ErrTaken
		if !wait && (errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed)) {
			return nil, ErrBusy
		}
		return nil, err
	}
	return func() { _, _ = m.UnlockContext(context.Background()) }, nil
}

func (r *rsync) Close() {
	for _, c := range r.rdbs {
		_ = c.Close()
	}
}

// --- rueidislock

type rueidisLocker struct{ l rueidislock.Locker }

func newRueidislock(t Target, cmds *atomic.Int64) (Mutexer, error) {
	opt, err := t.rueidisOption()
	if err != nil {
		return nil, err
	}
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   opt,
		KeyMajority:    1,
		KeyValidity:    TTL,
		NoLoopTracking: true,
		KeyPrefix:      "bench:rue",
		ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
			c, err := rueidis.NewClient(o)
			if err != nil {
				return nil, err
			}
			return countingRueidis{Client: c, n: cmds}, nil
		},
	})
	if err != nil {
		return nil, err
	}
	return &rueidisLocker{l: l}, nil
}

func (r *rueidisLocker) Lock(ctx context.Context, key string, wait bool) (func(), error) {
	var (
		cancel context.CancelFunc
		err    error
	)
	if wait {
		_, cancel, err = r.l.WithContext(ctx, key)
	} else {
		_, cancel, err = r.l.TryWithContext(ctx, key)
		if errors.Is(err, rueidislock.ErrNotLocked) {
			return nil, ErrBusy
		}
	}
	if err != nil {
		return nil, err
	}
	return cancel, nil
}

func (r *rueidisLocker) Close() { r.l.Close() }

// countingRueidis counts the commands a rueidis client sends.
type countingRueidis struct {
	rueidis.Client
	n *atomic.Int64
}

func (c countingRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countingRueidis) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

func (c countingRueidis) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c countingRueidis) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMultiCache(ctx, multi...)
}
