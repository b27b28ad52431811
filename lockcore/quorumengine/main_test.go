package quorumengine

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// masters starts n independent masters for the test: redis-server
// processes with an append-only file when one is on PATH, else embedded
// miniredis servers; it returns a client of each, closed at the test's
// end, and the servers (nil for miniredis).
func masters(t testing.TB, n int) ([]redis.UniversalClient, []*redistest.Server) {
	t.Helper()
	var cs []redis.UniversalClient
	var srvs []*redistest.Server
	for range n {
		addr := ""
		if srv := redistest.OwnReal(t); srv != nil {
			srvs = append(srvs, srv)
			addr = srv.Addr
		} else {
			addr = redistest.Mini(t).Addr
		}
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	return cs, srvs
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
