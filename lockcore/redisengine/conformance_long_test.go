//go:build long

package redisengine

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestConformanceQueue runs the engine conformance suite, as
// TestConformance does, on every deployment with hand-over in memory off
// (LocalHandOvers -1): every hold passes through Redis's queue.
func TestConformanceQueue(t *testing.T) { conformOnDeployments(t, -1) }

// TestConformanceMiniCluster runs the engine conformance suite on
// miniredis through a ClusterClient (a cluster of one node), at the
// defaults.
func TestConformanceMiniCluster(t *testing.T) {
	b := redistest.Mini(t)
	locktest.Run(t, conformingEngines(func(t *testing.T) redis.UniversalClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{b.Addr}})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, miniTimeout, 0))
}
