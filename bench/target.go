package bench

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/routelock/lock/internal/redisconf"
)

// Target is the Redis deployment the libraries run on, named as routelock's
// default Locker reads it from the environment: the variable (REDIS_URL for
// one server, REDIS_CLUSTER_URL for a Cluster, REDIS_SENTINEL_URL for a
// master behind Sentinel) and its URL.
type Target struct {
	Var, URL string
}

// The deployments a Target may be, as Target.Deployment names them.
const (
	Single   = "single"
	Cluster  = "cluster"
	Sentinel = "sentinel"
)

// ServerAt returns the Target of the one server at addr, database 0.
func ServerAt(addr string) Target { return Target{redisconf.Server, "redis://" + addr + "/0"} }

// Deployment names t's kind of deployment: Single, Cluster or Sentinel.
func (t Target) Deployment() string {
	switch t.Var {
	case redisconf.Cluster:
		return Cluster
	case redisconf.Sentinel:
		return Sentinel
	}
	return Single
}

// Client returns a go-redis client of t at go-redis's defaults but for a
// pool of 128 connections (every library gets the same), on database db of
// a single server, counting the commands it sends in cmds; with
// ctxDeadlines, ContextTimeoutEnabled is set.
func (t Target) Client(db int, ctxDeadlines bool, cmds *atomic.Int64) (redis.UniversalClient, error) {
	u := t.URL
	if db != 0 {
		if t.Deployment() != Single {
			return nil, fmt.Errorf("database %d: only a single server has more than one", db)
		}
		u = strings.TrimSuffix(u, "/0") + fmt.Sprintf("/%d", db)
	}
	conf, err := redisconf.Parse(t.Var, u)
	if err != nil {
		return nil, err
	}
	c := conf.Open(func(o *redisconf.Common) {
		*o.PoolSize = 128
		*o.ContextTimeoutEnabled = ctxDeadlines
	})
	c.AddHook(countHook{cmds})
	return c, nil
}

// rueidisOption returns rueidis's options for t.
func (t Target) rueidisOption() (rueidis.ClientOption, error) {
	switch t.Deployment() {
	case Cluster:
		o, err := redis.ParseClusterURL(t.URL)
		if err != nil {
			return rueidis.ClientOption{}, err
		}
		return rueidis.ClientOption{InitAddress: o.Addrs}, nil
	case Sentinel:
		o, err := redis.ParseFailoverURL(t.URL)
		if err != nil {
			return rueidis.ClientOption{}, err
		}
		return rueidis.ClientOption{InitAddress: o.SentinelAddrs, Sentinel: rueidis.SentinelOption{MasterSet: o.MasterName}}, nil
	}
	o, err := redis.ParseURL(t.URL)
	if err != nil {
		return rueidis.ClientOption{}, err
	}
	return rueidis.ClientOption{InitAddress: []string{o.Addr}}, nil
}
