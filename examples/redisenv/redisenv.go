// Package redisenv gives the examples their Redis: the server that
// REDIS_URL names, the Redis Cluster that REDIS_CLUSTER_URL names, or else
// an embedded miniredis on a loopback port. It is not internal, so that an
// example copied out of this repository still builds; a program of your
// own gets its client from lock.RedisFromEnv, or builds one itself.
package redisenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Redis is the examples' Redis server.
type Redis struct {
	// Desc says which server it is, for the examples' first line.
	Desc string

	opts    func() *redis.Options
	cluster func() *redis.ClusterOptions
	mini    *miniredis.Miniredis
}

// Open returns the Redis named by REDIS_URL (redis.ParseURL syntax), the
// Cluster named by REDIS_CLUSTER_URL (redis.ParseClusterURL syntax), or an
// embedded miniredis when both are empty.
func Open() (*Redis, error) {
	if u := os.Getenv("REDIS_CLUSTER_URL"); u != "" {
		if os.Getenv("REDIS_URL") != "" {
			return nil, fmt.Errorf("both REDIS_URL and REDIS_CLUSTER_URL are set: set one")
		}
		opt, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, fmt.Errorf("REDIS_CLUSTER_URL: %w", err)
		}
		return &Redis{
			Desc:    fmt.Sprintf("Redis Cluster at %v", opt.Addrs),
			cluster: func() *redis.ClusterOptions { o, _ := redis.ParseClusterURL(u); return o },
		}, nil
	}
	if u := os.Getenv("REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		return &Redis{
			Desc: "Redis at " + opt.Addr,
			opts: func() *redis.Options { o, _ := redis.ParseURL(u); return o },
		}, nil
	}
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true) // keys expire on the wall clock, as in Redis
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded Redis: %w", err)
	}
	return &Redis{
		Desc: "embedded Redis (miniredis) at " + m.Addr() + "; set REDIS_URL to use a real one",
		opts: func() *redis.Options { return &redis.Options{Addr: m.Addr()} },
		mini: m,
	}, nil
}

// Client returns a new client of the server or Cluster, as a separate
// process of the app would have. The caller closes it.
func (r *Redis) Client() redis.UniversalClient {
	if r.cluster != nil {
		return redis.NewClusterClient(r.cluster())
	}
	return redis.NewClient(r.opts())
}

// Cluster reports whether it is a Redis Cluster.
func (r *Redis) Cluster() bool { return r.cluster != nil }

// Close stops the embedded server, if there is one.
func (r *Redis) Close() {
	if r.mini != nil {
		r.mini.Close()
	}
}

// RunPrefix returns a key prefix of its own for this run of the example
// named name: "<name>:<8 random hex digits>:". Every key the run writes
// starts with it (the lock engine's too, through its Prefix), so that
// Sweep deletes them at exit, and nothing else of a Redis the user pointed
// the example at.
func RunPrefix(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + ":" + hex.EncodeToString(b[:]) + ":"
}

// sweepBound bounds how long Sweep runs, and sweepScans how many SCAN
// calls it makes on a server.
const (
	sweepBound = 10 * time.Second
	sweepScans = 100000
)

// Sweep deletes every key whose name starts with prefix, on the server or
// on each master of the Cluster: SCAN with MATCH, then UNLINK, which
// managed Redis services allow where they refuse KEYS. Run it once
// everything that writes under prefix has stopped (the Lockers closed). It
// gives up after 10 s.
func (r *Redis) Sweep(ctx context.Context, prefix string) error {
	if prefix == "" {
		return fmt.Errorf("sweep: empty prefix")
	}
	ctx, cancel := context.WithTimeout(ctx, sweepBound)
	defer cancel()
	rdb := r.Client()
	defer rdb.Close()
	match := globEscaper.Replace(prefix) + "*"
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return sweep(ctx, node, match)
		})
	}
	return sweep(ctx, rdb, match)
}

// globEscaper escapes the characters that a SCAN MATCH pattern reads.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// sweep unlinks the keys of one server that match match. Each key is
// unlinked on its own (in one pipeline per SCAN reply): a Cluster node
// refuses a command on keys of several slots.
func sweep(ctx context.Context, rdb redis.Cmdable, match string) error {
	var cursor uint64
	for range sweepScans {
		keys, next, err := rdb.Scan(ctx, cursor, match, 1000).Result()
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		if len(keys) > 0 {
			p := rdb.Pipeline()
			for _, k := range keys {
				p.Unlink(ctx, k)
			}
			if _, err := p.Exec(ctx); err != nil {
				return fmt.Errorf("sweep: %w", err)
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
	return fmt.Errorf("sweep: more than %d SCAN calls", sweepScans)
}
