package redisengine

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestConformance runs the engine conformance suite on the Engine, on
// every deployment of redistest.Deployments: miniredis, a real
// redis-server, a Cluster of 3 masters with replicas, and a master with
// replicas under Sentinel, at the defaults (hand-over in memory on).
// TestConformanceQueue runs it again with every hold handed over through
// Redis, and TestConformanceMiniCluster on miniredis as a cluster of one
// node (go test -tags long). The
// engines of one check share a key prefix, as the processes of one service
// do; each check has a prefix of its own.
func TestConformance(t *testing.T) { conformOnDeployments(t, 0) }

// conformOnDeployments runs the conformance suite on every deployment,
// with Options.LocalHandOvers handOvers and, on miniredis, miniTimeout.
func conformOnDeployments(t *testing.T, handOvers int) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		var timeout time.Duration // the default
		if !b.Real() {
			timeout = miniTimeout
		} else {
			// Real servers, each a backend of its own, take the suite's
			// loads side by side; miniredis, which runs one script at a
			// time in Go, runs first and alone.
			t.Parallel()
		}
		locktest.Run(t, conformingEngines(func(t *testing.T) redis.UniversalClient { return b.Universal(t) }, timeout, handOvers))
	})
}

// miniTimeout is Options.Timeout of the suite's engines on miniredis. It
// runs every script in a Lua interpreter written in Go, one call at a
// time: the suite's loads of 64 goroutines queue calls there for more than
// the default second on a 2-core machine busy with other test packages.
// The suite checks what the engine promises, not how fast miniredis is;
// on a real Redis it runs at the defaults.
const miniTimeout = 10 * time.Second

// conformingEngines returns the newEngine of locktest.Run: an Engine on a
// client of its own, with the prefix of its test, and Options.Timeout
// timeout (0: the default) and Options.LocalHandOvers handOvers.
func conformingEngines(client func(t *testing.T) redis.UniversalClient, timeout time.Duration, handOvers int) func(t *testing.T, ev lockcore.Events) lockcore.Engine {
	prefixes := make(map[*testing.T]string)
	mu := make(chan struct{}, 1) // guards prefixes
	return func(t *testing.T, ev lockcore.Events) lockcore.Engine {
		mu <- struct{}{}
		p, ok := prefixes[t]
		if !ok {
			p = redistest.Prefix(t)
			prefixes[t] = p
		}
		<-mu
		l, err := New(client(t), Options{Prefix: p, Events: ev, Timeout: timeout, LocalHandOvers: handOvers})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
}
