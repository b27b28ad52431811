// Package redistest provides Redis servers for tests: a real redis-server
// when REDIS_ADDR names one or redis-server is on PATH (started once per
// test binary on a free loopback port), and embedded miniredis on a
// machine without one; with the long tag, which CI selects, miniredis
// runs beside the real server too.
//
// Set ROUTELOCK_REQUIRE_REDIS=1 (CI does) to make a missing real server a
// test failure instead of a narrower run.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/routelock/lock/internal/redisconf"
)

// Backend is one Redis to run a test against.
type Backend struct {
	Name string // "miniredis", "redis", "cluster" or "sentinel"
	// Addr is one server's address; "" for a Cluster or Sentinel set-up,
	// which only Universal reaches.
	Addr string
	// Mini is the embedded server, nil for a real one.
	Mini *miniredis.Miniredis

	conf *redisconf.Config // a Cluster's or Sentinel's; nil for one server
	url  string            // conf's
}

// Client returns a new client of b, one server, closed when the test
// ends. It fails the test on a Cluster or Sentinel set-up: use Universal.
func (b *Backend) Client(t testing.TB) *redis.Client {
	t.Helper()
	if b.MultiNode() {
		t.Fatalf("%s: Client reaches one server; use Universal", b.Name)
	}
	c := redis.NewClient(&redis.Options{Addr: b.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Real reports whether b is a real redis-server.
func (b *Backend) Real() bool { return b.Mini == nil }

// Prefix returns a key prefix unique to this test, so tests sharing a real
// server never see each other's keys.
func Prefix(t testing.TB) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	return "t:" + name + ":" + hex.EncodeToString(r[:]) + ":"
}

// Mini starts an embedded miniredis whose TTLs run on the wall clock, closed
// when the test ends.
func Mini(t testing.TB) *Backend {
	t.Helper()
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		t.Fatalf("miniredis: %v", err)
	}
	t.Cleanup(m.Close)
	return &Backend{Name: "miniredis", Addr: m.Addr(), Mini: m}
}

// Best returns the real redis-server when there is one (see Backends), and
// else miniredis: for benchmarks, where the embedded server's CPU would count
// as the client's, and for long runs that need only one backend.
func Best(t testing.TB) *Backend {
	t.Helper()
	bs := Backends(t)
	if !bs[len(bs)-1].Real() {
		t.Log("no real redis-server: running on miniredis")
	}
	return bs[len(bs)-1]
}

// Backends returns a real redis-server when there is one, and miniredis
// when there is none; with the long tag (CI selects it) miniredis comes
// first beside the real server. Miniredis is the last backend only when
// there is no real one.
func Backends(t testing.TB) []*Backend {
	t.Helper()
	addr, err := realAddr()
	switch {
	case err != nil:
		t.Fatalf("real redis: %v", err)
	case addr != "" && thorough:
		return []*Backend{Mini(t), {Name: "redis", Addr: addr}}
	case addr != "":
		return []*Backend{{Name: "redis", Addr: addr}}
	case os.Getenv("ROUTELOCK_REQUIRE_REDIS") == "1":
		t.Fatal("ROUTELOCK_REQUIRE_REDIS=1 but no REDIS_ADDR and no redis-server on PATH")
	}
	return []*Backend{Mini(t)}
}

// Run runs f as a subtest once per backend.
func Run(t *testing.T, f func(t *testing.T, b *Backend)) {
	t.Helper()
	for _, b := range Backends(t) {
		t.Run(b.Name, func(t *testing.T) { f(t, b) })
	}
}

var (
	shared struct {
		once sync.Once
		addr string
		srv  *Server
		err  error
	}
)

func realAddr() (string, error) {
	shared.once.Do(func() {
		if a := os.Getenv("REDIS_ADDR"); a != "" {
			shared.addr = a
			return
		}
		if _, err := exec.LookPath("redis-server"); err != nil {
			return
		}
		shared.srv, shared.err = Start()
		if shared.err == nil {
			shared.addr = shared.srv.Addr
		}
	})
	return shared.addr, shared.err
}

// Main is the TestMain of a package that uses this one: it runs the tests,
// stops the shared redis-server, and fails the binary on a leaked goroutine
// when the tests passed. It does not return.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	if code == 0 {
		if err := FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// FindLeaks returns an error naming the goroutines still running besides
// the caller's, if any are after 3 s. A closed go-redis client whose dials
// failed leaves its pool's dial probe sleeping for up to a second before it
// sees the close and returns, longer than goleak.Find waits by itself.
func FindLeaks() error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// StopShared stops the redis-server started for this test binary, if any.
// Main calls it.
func StopShared() {
	if shared.srv != nil {
		shared.srv.Stop()
	}
	if oneNode.srv != nil {
		oneNode.srv.Stop()
		_ = os.RemoveAll(oneNode.dir)
	}
	stopSharedSets()
}

// Server is a redis-server process started by a test.
type Server struct {
	Addr   string
	Port   int
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited (and was waited for)
	dir    string        // its append-only file's, or "" for none
	args   []string      // beyond the common ones

	sentinel string // a sentinel's config file; "" for a server
}

// Start starts redis-server on a free loopback port, with an append-only
// file in a directory of its own, and waits until it answers PING. It
// accepts DEBUG from loopback, so that a test can stall it with DEBUG
// SLEEP. Its data survives Restart. The engine's restart guard, which
// refuses fresh locks for a TTL after a server without an append-only
// file starts (it may have lost held locks), does not apply to it.
func Start() (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	s, err := startWith(dir, "--appendonly", "yes", "--appendfsync", "no", "--dir", dir)
	if err != nil {
		_ = os.RemoveAll(dir)
	}
	return s, err
}

// StartVolatile starts redis-server as Start does, but without
// persistence: Restart loses every key, and the engine's restart guard
// applies after each start.
func StartVolatile() (*Server, error) {
	return startWith("")
}

func startWith(dir string, args ...string) (*Server, error) {
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir, args: args}
		if err := s.start(); !errors.Is(err, errExited) {
			return s, err
		}
		// Another process took the free port before the server bound it.
	}
	return nil, fmt.Errorf("redis-server: %w five times", errExited)
}

// errExited: a started redis-server exited before it answered, as when
// another process took its port first.
var errExited = errors.New("redis-server exited before it answered")

func (s *Server) start() error {
	if s.sentinel != "" {
		s.cmd = exec.Command("redis-server", s.sentinel, "--sentinel", "--loglevel", "warning", "--logfile", "")
	} else {
		s.cmd = exec.Command("redis-server", append([]string{
			"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--enable-debug-command", "local",
			"--loglevel", "warning", "--logfile", ""}, s.args...)...)
	}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	cmd, exited := s.cmd, make(chan struct{})
	s.exited = exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info := c.InfoMap(ctx, "server")
		err, pid := info.Err(), info.Item("Server", "process_id")
		cancel()
		switch {
		case err == nil && pid == strconv.Itoa(cmd.Process.Pid):
			return nil
		case err == nil:
			err = fmt.Errorf("process %s answers, not %d", pid, cmd.Process.Pid)
		}
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("%w: %s: %v", errExited, s.Addr, err)
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redis-server on %s did not answer: %w", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a starting process, bounded above
	}
}

// Stop kills the server, waits for it to exit, and removes its
// append-only file.
func (s *Server) Stop() {
	s.kill()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// Kill kills the server (SIGKILL) and waits for it to exit; its files
// stay.
func (s *Server) Kill() { s.kill() }

func (s *Server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.cmd = nil
	}
}

// Restart kills the server (SIGKILL) and starts it again on the same port:
// a server of StartVolatile loses all its data, one of Start reloads its
// append-only file.
func (s *Server) Restart() error {
	s.kill()
	return s.start()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Own runs f once per backend with a Redis of the test's own, which f may
// stop: a fresh miniredis, and a fresh redis-server process when a real
// server is available.
func Own(t *testing.T, f func(t *testing.T, addr string, stop func())) {
	t.Run("miniredis", func(t *testing.T) {
		b := Mini(t)
		f(t, b.Addr, b.Mini.Close)
	})
	for _, b := range Backends(t) {
		if !b.Real() {
			continue
		}
		t.Run("redis", func(t *testing.T) {
			srv, err := Start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Stop)
			f(t, srv.Addr, srv.Stop)
		})
	}
}

// onPath reports whether redis-server is on PATH. When it is not, it fails
// the test under ROUTELOCK_REQUIRE_REDIS=1, and otherwise logs what then
// does not run.
func onPath(t testing.TB, without string) bool {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err == nil {
		return true
	}
	if os.Getenv("ROUTELOCK_REQUIRE_REDIS") == "1" {
		t.Fatal("ROUTELOCK_REQUIRE_REDIS=1 but no redis-server on PATH")
	}
	t.Log("no redis-server on PATH: " + without)
	return false
}

// OwnReal returns a redis-server started for the test alone, which it may
// reconfigure (CONFIG SET maxmemory, say), stopped at its end; nil on a
// machine without redis-server, unless ROUTELOCK_REQUIRE_REDIS=1, which
// makes that a failure. It is for what miniredis cannot do.
func OwnReal(t testing.TB) *Server {
	t.Helper()
	return own(t, Start, "the cases that need a real server of their own do not run here")
}

// OwnVolatile is OwnReal for a server without persistence (see
// StartVolatile): the test may kill and restart it empty.
func OwnVolatile(t testing.TB) *Server {
	t.Helper()
	return own(t, StartVolatile, "the cases that restart a real server of their own do not run here")
}

// own starts a server of the test's own with start, stopped at its end;
// nil, saying what does not run (without), when redis-server is not on
// PATH (see onPath).
func own(t testing.TB, start func() (*Server, error), without string) *Server {
	t.Helper()
	if !onPath(t, without) {
		return nil
	}
	srv, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// DebugBackends returns the real redis-servers that accept DEBUG (DEBUG
// SLEEP stalls a server, which miniredis cannot do): the shared one (see
// Backends) when it does, else one started for the test and stopped at its
// end. It is empty on a machine without redis-server, unless
// ROUTELOCK_REQUIRE_REDIS=1, which makes that a failure.
func DebugBackends(t testing.TB) []*Backend {
	t.Helper()
	for _, b := range Backends(t) {
		if !b.Real() {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: b.Addr, MaxRetries: -1})
		err := c.Do(context.Background(), "DEBUG", "SLEEP", 0).Err()
		_ = c.Close()
		if err == nil {
			return []*Backend{b}
		}
	}
	srv := OwnReal(t) // a server of the test's own accepts DEBUG from loopback
	if srv == nil {
		return nil
	}
	return []*Backend{{Name: "redis", Addr: srv.Addr}}
}

// oneNode is the one-node cluster of ClusterBackends, started once per
// test binary and stopped by StopShared.
var oneNode struct {
	once sync.Once
	srv  *Server
	dir  string
	err  error
}

// ClusterBackends returns servers for a redis.ClusterClient, each a cluster
// of one node that owns every slot: when redis-server is on PATH, a real
// one with cluster mode on (see StartCluster), started once per test
// binary and shared by its tests, which use keys of their own; and
// miniredis, which answers CLUSTER SLOTS so, when redis-server is not on
// PATH or, as Backends, beside it with the long tag.
// ROUTELOCK_REQUIRE_REDIS=1 makes a missing redis-server a failure.
func ClusterBackends(t testing.TB) []*Backend {
	t.Helper()
	if !onPath(t, "the cluster runs on miniredis only") {
		return []*Backend{Mini(t)}
	}
	oneNode.once.Do(func() {
		dir, err := os.MkdirTemp("", "routelock-cluster-")
		if err != nil {
			oneNode.err = err
			return
		}
		oneNode.dir = dir
		oneNode.srv, oneNode.err = StartCluster(dir)
	})
	if oneNode.err != nil {
		t.Fatal(oneNode.err)
	}
	real := &Backend{Name: "redis-cluster", Addr: oneNode.srv.Addr}
	if thorough {
		return []*Backend{Mini(t), real}
	}
	return []*Backend{real}
}

// StartCluster starts redis-server in cluster mode on a free loopback port,
// with its cluster state file and an append-only file in dir (so that the
// engine's restart guard does not apply to it, as with Start), makes it a
// cluster of one node that owns all 16384 slots, and waits until it
// reports cluster_state:ok.
func StartCluster(dir string) (*Server, error) {
	s, err := startWith("", "--appendonly", "yes", "--appendfsync", "no",
		"--cluster-enabled", "yes", "--cluster-config-file", dir+"/nodes.conf", "--dir", dir)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("cluster on %s: ADDSLOTSRANGE: %w", s.Addr, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("cluster on %s not ok after 10s: %q %v", s.Addr, info, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a starting cluster, bounded above
	}
}
