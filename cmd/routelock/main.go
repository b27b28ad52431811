// Command routelock lists, inspects and force-releases the locks that
// routelock's Redis engine keeps, lists and opens its closed gates
// (sold-out resources), and lists and drops the results it stores for
// idempotency keys, from a shell.
//
// Usage:
//
//	routelock [flags] ls [PREFIX]
//	routelock [flags] inspect KEY
//	routelock [flags] release KEY -reason TEXT
//	routelock [flags] gates
//	routelock [flags] open KEY
//	routelock [flags] results [PREFIX]
//	routelock [flags] drop KEY
//
// ls lists the locks held or awaited whose key starts with PREFIX (an
// escaped key prefix such as productID:), in key order, each with its
// holder's instance and route; inspect shows one lock: its holder,
// fencing tokens, lease, waiters in order and its latest force-releases;
// release force-releases the hold of KEY, whoever holds it,
// and keeps the reason in the key's audit record. The holder's lease
// context is cancelled with cause lockcore.ErrRevoked (at its next renewal
// at the latest), and the next waiter gets the lock with a greater fencing
// token. KEY is a key as ls prints it, such as productID:42; its parts
// are escaped as lockcore.NewKey escapes them (%3A for ':'). gates lists
// the closed gates (lock.SoldOut): the resources every instance refuses at
// once; open opens the gate of KEY, and every instance serves it again.
// A segment's key (lock.Segments) has a space: quote it in a shell, as
// routelock open 'productID:42 #3'; after a restock open the segments
// first, then the resource.
//
// results lists the results stored for idempotency keys
// (Locker.Idempotent, middleware.Idempotency; lockcore.Results) whose lookup key starts with PREFIX,
// in key order, each with its size in bytes and when Redis drops it by
// itself: the lookup key is "idempotency:", the operation (the HTTP method
// and route template, or the gRPC method), the caller ("~" for none) and a
// digest of the client's idempotency key, so that neither the client's key
// nor the stored response is ever shown; PREFIX such as
// idempotency:POST:/orders: narrows it to one route. drop drops the
// stored result of KEY, a lookup key as results prints it: the next
// request with that idempotency key runs again, as if it were the first.
// An engine that keeps no results makes both fail.
//
// While the restart guard refuses fresh locks (after a Redis without an
// append-only file starts, for the application engines'
// redisengine.Options.MaxTTL), ls and inspect say so in a line before
// their output, "Redis restarted without its data: no lock is taken for
// 4.2s more (restart guard)", and with -json in the field
// restart_guard_ms. The command's engine is a redisengine.Options.OperatorOnly one:
// it takes no lock and decides no guard, and reads the one the
// application's engines decided (none until one has).
//
// Holders and waiters are named by their instance: the name of the engine
// that took the hold or waits (redisengine.Options.Name, by default
// <hostname>-<pid>, such as a pod's name) and its engine id, as
// "pod-a (033a2e7db54e2a2f)", or the engine id alone when the name is not
// known (an engine whose record expired). inspect shows, for each holder,
// the route or gRPC method that took the hold and its request's trace id
// (lock.Trace), and for each waiter the same, when the engine knows them:
// the Redis engine learns them a moment after a hold or wait began (a
// third of the engine's TTL, at most a second, checked that often: within
// twice that), so that a hold held briefly shows none.
//
// The Redis is the one the environment names, as for the package-level
// lock.ByParam without lock.SetDefault: REDIS_URL for one server
// (redis://[user:password@]host:6379/0, rediss:// for TLS,
// unix:///path/to/redis.sock), REDIS_CLUSTER_URL for a Redis Cluster
// (redis://[user:password@]node1:6379?addr=node2:6379&addr=node3:6379; ls
// lists the locks of every master), or REDIS_SENTINEL_URL for a master
// behind Sentinel
// (redis://sentinel1:26379?addr=sentinel2:26379&master_name=mymaster&password=...);
// localhost:6379 when none is set; or REDIS_QUORUM_URLS, the independent
// masters of the quorum engine (lockcore/quorumengine), redis:// URLs
// comma-separated (a lock is listed when a majority holds it; release
// removes it from every master that answers). No message repeats a
// password.
//
// This command links the Redis engine only. The same command built with
// the etcd engine, github.com/routelock/lock/etcdengine/cmd/routelock,
// works on etcd when ETCD_ENDPOINTS names it (ls, inspect and release; the
// etcd engine has no gates and no restart guard), and on Redis otherwise.
//
// Flags, before or after the command:
//
//	-json           print JSON instead of a table: a list, a lock, a revocation, the gates, an opening, the stored results or a drop, as package admin answers them (with restart_guard_ms while the restart guard lasts)
//	-prefix P       the engine's key prefix (redisengine.Options.Prefix), default "routelock:" (on etcd: etcdengine.Options.Prefix, default "routelock/")
//	-timeout D      give up after D (default 10s)
//	-limit N        ls, results: show at most N locks or results (default 1000; 0: all)
//	-reason TEXT    release: why (required)
//
// Exit status: 0 done, 1 an error (Redis unreachable, say), 2 a usage
// error, 3 release of a lock nobody holds or drop of a result not stored.
package main

import "github.com/routelock/lock/internal/cli"

func main() { cli.Main(cli.OpenRedis) }
