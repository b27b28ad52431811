// Package redisenv gives the examples their Redis: the server that
// REDIS_URL names, or else an embedded miniredis on a loopback port.
package redisenv

import (
	"fmt"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Open returns a client of the Redis named by REDIS_URL (redis.ParseURL
// syntax), or of an embedded miniredis when REDIS_URL is empty, a
// description of which it is, and a function that closes both.
func Open() (rdb *redis.Client, desc string, closeFn func(), err error) {
	if u := os.Getenv("REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		rdb = redis.NewClient(opt)
		return rdb, "Redis at " + opt.Addr, func() { rdb.Close() }, nil
	}
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true) // keys expire on the wall clock, as in Redis
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, "", nil, fmt.Errorf("embedded Redis: %w", err)
	}
	rdb = redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, "embedded Redis (miniredis) at " + m.Addr() + "; set REDIS_URL to use a real one",
		func() { rdb.Close(); m.Close() }, nil
}
