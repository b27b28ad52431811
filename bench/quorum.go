package bench

import (
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore/quorumengine"
)

// quorum3 is three independent redis-servers on loopback (append-only
// file, appendfsync no, as redistest.Start runs them), the masters of
// the quorum engine.
var quorum3 = &Servers{Var: "LOCKBENCH_QUORUM3", start: func() (string, func(), error) {
	var srvs []*redistest.Server
	stop := func() {
		for _, s := range srvs {
			s.Stop()
		}
	}
	var addrs []string
	for range 3 {
		s, err := redistest.Start()
		if err != nil {
			stop()
			return "", nil, err
		}
		srvs = append(srvs, s)
		addrs = append(addrs, s.Addr)
	}
	return strings.Join(addrs, ","), stop, nil
}}

// newQuorum is routelock's quorum engine on the masters of s, each
// through a client at go-redis's defaults (a pool of 128, as every
// library gets), counting the commands sent to all of them in cmds.
func newQuorum(s *Servers, cmds *atomic.Int64) (Mutexer, error) {
	where, err := s.Up()
	if err != nil {
		return nil, err
	}
	var cs []redis.UniversalClient
	closeAll := func() {
		for _, c := range cs {
			_ = c.Close()
		}
	}
	for _, a := range strings.Split(where, ",") {
		c := redis.NewClient(&redis.Options{Addr: a, PoolSize: 128})
		c.AddHook(countHook{cmds})
		cs = append(cs, c)
	}
	e, err := quorumengine.New(cs, quorumengine.Options{Prefix: "bench:rq:", TTL: TTL})
	if err != nil {
		closeAll()
		return nil, err
	}
	return &routelock{close: func() { _ = e.Close(); closeAll() }, lk: lifecycle.Serve(e, nil)}, nil
}
