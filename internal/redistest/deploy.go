package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redisconf"
)

// The variables that name the tests' shared multi-node deployments, in
// redisconf's syntax (CI sets them): a Cluster of 3 masters with a replica
// each, and a master with 2 replicas under 3 sentinels. Unset, with
// redis-server on PATH, each test binary that asks starts its own.
const (
	ClusterVar  = "REDIS_TEST_CLUSTER_URL"
	SentinelVar = "REDIS_TEST_SENTINEL_URL"
)

// SentinelMaster is the name Sentinel knows the master of a SentinelSet by.
const SentinelMaster = "routelock"

// Universal returns a new client of b at go-redis's defaults, closed when
// the test ends: a *redis.Client for one server, a *redis.ClusterClient
// for a Cluster, a failover *redis.Client for Sentinel.
func (b *Backend) Universal(t testing.TB) redis.UniversalClient {
	t.Helper()
	return b.UniversalWith(t, nil)
}

// UniversalWith is Universal with the shared options adjusted by tune.
func (b *Backend) UniversalWith(t testing.TB, tune func(*redisconf.Common)) redis.UniversalClient {
	t.Helper()
	conf := b.conf
	if conf == nil {
		c, err := redisconf.Parse(redisconf.Server, "redis://"+b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conf = &c
	}
	c := conf.Open(tune)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// At returns the one server at addr as a backend.
func At(addr string) *Backend { return &Backend{Name: "redis", Addr: addr} }

// Env returns the environment variable and value that name b to
// redisconf.FromEnv (REDIS_URL, REDIS_CLUSTER_URL or REDIS_SENTINEL_URL).
func (b *Backend) Env() (name, value string) {
	if b.conf != nil {
		return b.conf.Var, b.url
	}
	return redisconf.Server, "redis://" + b.Addr + "/0"
}

// MultiNode reports whether b is a Cluster or a Sentinel set-up.
func (b *Backend) MultiNode() bool { return b.conf != nil }

// Deployments returns the backends of Backends and, where redis-server is
// available and with the long tag (or when the environment names them), a
// Cluster (3 masters, 3 replicas) and a master with 2 replicas under 3
// sentinels: those REDIS_TEST_CLUSTER_URL and REDIS_TEST_SENTINEL_URL
// name, or else ones started once for the test binary. Tests that run on them use only Universal clients, and keys of
// their own prefix; they must not stop or reconfigure a node.
func Deployments(t testing.TB) []*Backend {
	t.Helper()
	bs := Backends(t)
	named := os.Getenv(ClusterVar) != "" || os.Getenv(SentinelVar) != ""
	if !bs[len(bs)-1].Real() && os.Getenv(ClusterVar) == "" || !thorough && !named {
		return bs // no redis-server here, and none named; or not the long tag
	}
	// The binary's own sets, when the environment names none, start side
	// by side: each waits mostly for its nodes to agree.
	var wg sync.WaitGroup
	for _, d := range []struct {
		env    string
		start  func() (*Set, error)
		shared *sharedSet
	}{{ClusterVar, StartClusterSet, &sharedCluster}, {SentinelVar, StartSentinelSet, &sharedSentinel}} {
		if os.Getenv(d.env) == "" {
			wg.Go(func() { _, _ = d.shared.get(d.start) })
		}
	}
	wg.Wait()
	for _, d := range []struct {
		name, env string
		start     func() (*Set, error)
		shared    *sharedSet
	}{
		{"cluster", ClusterVar, StartClusterSet, &sharedCluster},
		{"sentinel", SentinelVar, StartSentinelSet, &sharedSentinel},
	} {
		raw := os.Getenv(d.env)
		name := redisconf.Cluster
		if d.name == "sentinel" {
			name = redisconf.Sentinel
		}
		if raw == "" {
			set, err := d.shared.get(d.start)
			if err != nil {
				t.Fatalf("%s: %v", d.name, err)
			}
			raw = set.URL
		}
		conf, err := redisconf.Parse(name, raw)
		if err != nil {
			t.Fatalf("%s: %v", d.env, err)
		}
		bs = append(bs, &Backend{Name: d.name, conf: &conf, url: raw})
	}
	return bs
}

// RunDeployments runs f as a subtest once per backend of Deployments.
func RunDeployments(t *testing.T, f func(t *testing.T, b *Backend)) {
	t.Helper()
	for _, b := range Deployments(t) {
		t.Run(b.Name, func(t *testing.T) { f(t, b) })
	}
}

type sharedSet struct {
	once sync.Once
	set  *Set
	err  error
}

var sharedCluster, sharedSentinel sharedSet

func (s *sharedSet) get(start func() (*Set, error)) (*Set, error) {
	s.once.Do(func() {
		// A node whose free port another process took first exits at
		// once (errExited): the set, stopped, starts again on new ports.
		for range 3 {
			if s.set, s.err = start(); !errors.Is(s.err, errExited) {
				return
			}
		}
	})
	return s.set, s.err
}

func stopSharedSets() {
	for _, s := range []*sharedSet{&sharedCluster, &sharedSentinel} {
		if s.set != nil {
			s.set.Stop()
		}
	}
}

// Set is a multi-node deployment started by a test: redis-server
// processes and, for Sentinel, the sentinels.
type Set struct {
	// URL names it in redisconf's syntax (REDIS_CLUSTER_URL's or
	// REDIS_SENTINEL_URL's).
	URL string
	// Servers are the redis-servers: for a Cluster the first three start
	// as masters; for Sentinel the first is the first master.
	Servers []*Server
	// Sentinels are the sentinels, for Sentinel.
	Sentinels []*Server
	dir       string
}

// Stop kills every process of s and removes its files.
func (s *Set) Stop() {
	for _, srv := range append(append([]*Server(nil), s.Sentinels...), s.Servers...) {
		srv.kill()
	}
	_ = os.RemoveAll(s.dir)
}

// Conf returns the deployment as redisconf reads it.
func (s *Set) Conf() redisconf.Config {
	name := redisconf.Cluster
	if len(s.Sentinels) > 0 {
		name = redisconf.Sentinel
	}
	c, err := redisconf.Parse(name, s.URL)
	if err != nil {
		panic(err) // URL is ours
	}
	return c
}

// Backend returns s as a backend of the given name.
func (s *Set) Backend(name string) *Backend {
	c := s.Conf()
	return &Backend{Name: name, conf: &c, url: s.URL}
}

// bothFree picks a loopback port, below the kernel's ephemeral range, that
// is free together with port+10000 (a Cluster node's bus port).
func bothFree() (int, error) {
	for range 50 {
		p := 20000 + rand.IntN(12000)
		ok := true
		var ls []net.Listener
		for _, q := range []int{p, p + 10000} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			_ = l.Close()
		}
		if ok {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port pair")
}

// startNode starts a redis-server in dir/<port> with an append-only file
// and the given flags.
func startNode(dir string, port int, args ...string) (*Server, error) {
	d := filepath.Join(dir, strconv.Itoa(port))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: d,
		args: append([]string{"--appendonly", "yes", "--appendfsync", "no", "--dir", d,
			"--repl-diskless-sync-delay", "0"}, args...)}
	return s, s.start()
}

// StartClusterSet starts a Redis Cluster of 3 masters with a replica each
// on loopback (redis-cli --cluster create), and waits until every node
// reports it whole. Its nodes time each other out after 2 s.
func StartClusterSet() (*Set, error) {
	return startClusterSet(6)
}

// StartVolatileClusterSet starts a Redis Cluster of 3 masters without
// replicas or persistence, as StartClusterSet does: a master's Restart
// brings it back empty, serving the slots it served (its cluster state
// file stays), with nobody to take over meanwhile, and the engine's
// restart guard applies after each start.
func StartVolatileClusterSet() (*Set, error) {
	return startClusterSet(3, "--appendonly", "no")
}

// startClusterSet starts a Cluster of n nodes, 3 masters and the rest
// their replicas, each started with the flags after the common ones.
func startClusterSet(n int, flags ...string) (*Set, error) {
	dir, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return nil, err
	}
	set := &Set{dir: dir}
	fail := func(err error) (*Set, error) { set.Stop(); return nil, err }
	var addrs []string
	for range n {
		p, err := bothFree()
		if err != nil {
			return fail(err)
		}
		srv, err := startNode(dir, p, append([]string{"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, strconv.Itoa(p), "nodes.conf"),
			"--cluster-node-timeout", "2000"}, flags...)...)
		if err != nil {
			return fail(err)
		}
		set.Servers = append(set.Servers, srv)
		addrs = append(addrs, srv.Addr)
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", strconv.Itoa(n/3-1), "--cluster-yes")...).CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("redis-cli --cluster create: %v: %s", err, out))
	}
	if err := WaitCluster(set.Servers, 20*time.Second); err != nil {
		return fail(err)
	}
	set.URL = "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	return set, nil
}

// WaitCluster waits until every server of a Cluster says it is whole
// (cluster_state:ok, every node known), and every replica's link to its
// master is up.
func WaitCluster(servers []*Server, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for _, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		var last string
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := c.ClusterInfo(ctx).Result()
			repl, err2 := c.Info(ctx, "replication").Result()
			cancel()
			last = fmt.Sprint(info, repl, err, err2)
			if err == nil && err2 == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(servers))) &&
				(strings.Contains(repl, "role:master") || strings.Contains(repl, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				return fmt.Errorf("cluster node %s not ready after %v: %s", s.Addr, bound, last)
			}
			time.Sleep(50 * time.Millisecond) // polling starting servers, bounded above
		}
		_ = c.Close()
	}
	return nil
}

// StartSentinelSet starts a master with 2 replicas and 3 sentinels that
// monitor it as SentinelMaster, quorum 2, a master down after 1 s, on
// loopback, and waits until every sentinel knows the replicas and the
// other sentinels.
func StartSentinelSet() (*Set, error) {
	dir, err := os.MkdirTemp("", "redistest-sentinel-")
	if err != nil {
		return nil, err
	}
	set := &Set{dir: dir}
	fail := func(err error) (*Set, error) { set.Stop(); return nil, err }
	for i := range 3 {
		p, err := freePort()
		if err != nil {
			return fail(err)
		}
		var args []string
		if i > 0 {
			args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(set.Servers[0].Port)}
		}
		srv, err := startNode(dir, p, args...)
		if err != nil {
			return fail(err)
		}
		set.Servers = append(set.Servers, srv)
	}
	var addrs []string
	for range 3 {
		s, err := startSentinel(dir, set.Servers[0].Port)
		if err != nil {
			return fail(err)
		}
		set.Sentinels = append(set.Sentinels, s)
		addrs = append(addrs, s.Addr)
	}
	if err := WaitSentinels(set.Sentinels, 2, 20*time.Second); err != nil {
		return fail(err)
	}
	set.URL = "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=") + "&master_name=" + SentinelMaster
	return set, nil
}

// startSentinel starts a sentinel on a free port, with a config file of its
// own that monitors the master on masterPort.
func startSentinel(dir string, masterPort int) (*Server, error) {
	p, err := freePort()
	if err != nil {
		return nil, err
	}
	d := filepath.Join(dir, "sentinel-"+strconv.Itoa(p))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(d, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 2\n"+
		"sentinel down-after-milliseconds %[3]s 1000\n"+
		"sentinel failover-timeout %[3]s 2000\n"+
		"sentinel parallel-syncs %[3]s 2\n", p, d, SentinelMaster, masterPort)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(p), Port: p, dir: d, sentinel: conf}
	return s, s.start()
}

// WaitSentinels waits until every sentinel knows the master with its
// replicas replicas and the other sentinels, and finds the master up.
func WaitSentinels(sentinels []*Server, replicas int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for _, s := range sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		var last string
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			m, err := c.Master(ctx, SentinelMaster).Result()
			cancel()
			last = fmt.Sprint(m, err)
			if err == nil && m["num-slaves"] == strconv.Itoa(replicas) &&
				m["num-other-sentinels"] == strconv.Itoa(len(sentinels)-1) && m["flags"] == "master" {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				return fmt.Errorf("sentinel %s not ready after %v: %s", s.Addr, bound, last)
			}
			time.Sleep(50 * time.Millisecond) // polling starting servers, bounded above
		}
		_ = c.Close()
	}
	return nil
}
