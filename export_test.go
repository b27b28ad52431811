package lock

import (
	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// NewRedis is New with the Redis engine's options o (a key prefix per
// test, short timeouts), which New itself leaves at their defaults: a
// Locker that owns its engine, told the events of Observe, as New's is.
func NewRedis(rdb redis.UniversalClient, o redisengine.Options, opts ...Option) *Locker {
	return newRedis(rdb, o, opts)
}

// Wrapped returns the engine the Locker's routes lock through: the engine
// of New or FromEngine, wrapped by its observers.
func (l *Locker) Wrapped() lockcore.Engine { return l.engine }
