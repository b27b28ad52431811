package quorumengine

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
)

// TestMain runs the tests, stops the masters they shared, and fails the
// binary on a leaked goroutine when the tests passed.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, srv := range shared.srvs {
		srv.Stop()
	}
	redistest.StopShared()
	if code == 0 {
		if err := redistest.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// shared is the three masters the tests share, each test under a prefix
// of its own: redis-server processes with an append-only file, started
// by the first test that asks.
var shared struct {
	once sync.Once
	srvs []*redistest.Server
	err  error
}

// masters returns a client of each of n masters, closed at the test's
// end: the shared redis-servers when one is on PATH, else embedded
// miniredis servers of the test's own.
func masters(t testing.TB, n int) []redis.UniversalClient {
	t.Helper()
	var addrs []string
	_, err := exec.LookPath("redis-server")
	if err != nil && os.Getenv("ROUTELOCK_REQUIRE_REDIS") == "1" {
		t.Fatal("ROUTELOCK_REQUIRE_REDIS=1 but no redis-server on PATH")
	}
	if n == 3 && err == nil {
		shared.once.Do(func() {
			for range 3 {
				srv, err := redistest.Start()
				if err != nil {
					shared.err = err
					return
				}
				shared.srvs = append(shared.srvs, srv)
			}
		})
		if shared.err != nil {
			t.Fatal(shared.err)
		}
		for _, srv := range shared.srvs {
			addrs = append(addrs, srv.Addr)
		}
	} else {
		for range n {
			addrs = append(addrs, redistest.Mini(t).Addr)
		}
	}
	var cs []redis.UniversalClient
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// newEngine returns an engine on cs with o, closed at the test's end.
func newEngine(t testing.TB, cs []redis.UniversalClient, o Options) *engine {
	t.Helper()
	if o.TTL == 0 {
		o.TTL = 2 * time.Second
	}
	le, err := New(cs, o)
	if err != nil {
		t.Fatal(err)
	}
	e := le.(*engine)
	e.defect = planted()
	if e.defect == "oneVote" {
		e.quorum = 1 // the planted defect: one master's grant is a hold
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}
