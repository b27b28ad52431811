// Command routelock is the routelock command
// (github.com/routelock/lock/cmd/routelock) built with the etcd engine as
// well: when ETCD_ENDPOINTS is set (comma-separated etcd client URLs, such
// as http://etcd1:2379,http://etcd2:2379), ls, inspect and release work on
// the locks that package etcdengine keeps in that etcd, and results and
// drop on the results it keeps for idempotency keys, under -prefix
// (default "routelock/", etcdengine.Options.Prefix); otherwise on Redis,
// as that command does. The etcd engine has no gates: gates and open say
// so; and has no restart guard, so no line says it refuses locks.
// ETCD_ENDPOINTS together with a REDIS_ variable is an error.
//
//	go install github.com/routelock/lock/etcdengine/cmd/routelock@latest
//	ETCD_ENDPOINTS=http://127.0.0.1:2379 routelock ls
package main

import (
	"fmt"

	_ "github.com/routelock/lock/etcdengine" // registers the etcd engine
	"github.com/routelock/lock/internal/cli"
	"github.com/routelock/lock/internal/defaultengine"
	"github.com/routelock/lock/lockcore"
)

func main() { cli.Main(open) }

// open opens the etcd engine's Operator when ETCD_ENDPOINTS is set, and
// the Redis engine's otherwise.
func open(env func(string) string, prefix string) (lockcore.Operator, string, func(), error) {
	if env(defaultengine.EtcdEndpoints) == "" {
		return cli.OpenRedis(env, prefix)
	}
	for _, v := range []string{"REDIS_URL", "REDIS_CLUSTER_URL", "REDIS_SENTINEL_URL"} {
		if env(v) != "" {
			return nil, "", nil, fmt.Errorf("%w: %s and %s are both set: set one, for etcd or for Redis", lockcore.ErrMisconfigured, defaultengine.EtcdEndpoints, v)
		}
	}
	return defaultengine.EtcdEngine().Operator(env, prefix)
}
