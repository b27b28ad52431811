//go:build long

package interceptor_test

import (
	"testing"

	"github.com/routelock/lock/internal/redistest"
)

// TestIdempotencyRunsOnceDeployments: 100 keys, each sent 10 times at
// once over 3 server instances, on every deployment (miniredis, a
// redis-server, a Cluster, a master under sentinels): each key's handler
// ran once and every duplicate got its reply, marked as a replay.
// Miniredis and the sentinels' master get 30 keys: miniredis runs its
// scripts in this process, and 1000 calls at once under -race keep it past
// the engine's Timeout; the sentinels (down-after-milliseconds 1000) may
// take a master that loaded for a failed one, and a failover loses the
// results its replicas had not received yet (Redis replicates
// asynchronously): their keys then run again.
func TestIdempotencyRunsOnceDeployments(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		keys := 100
		if !b.Real() || b.Name == "sentinel" {
			keys = 30
		}
		runsOnce(t, b, keys)
	})
}
