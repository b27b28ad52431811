// Package redisenv gives the examples their Redis: the server that
// REDIS_URL names, the Redis Cluster that REDIS_CLUSTER_URL names, or else
// an embedded miniredis on a loopback port.
package redisenv

import (
	"fmt"
	"os"

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
