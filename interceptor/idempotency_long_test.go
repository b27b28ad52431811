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
func TestIdempotencyRunsOnceDeployments(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		runsOnce(t, b, 100)
	})
}
