package redisengine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routelock/lock/internal/redistest"
)

// TestTimeoutCopyRunsNoHooks pins why the engine does not send a call from
// its caller's goroutine through a copy of a client that ignores context
// deadlines: go-redis's Client.WithTimeout copy, the one way to bound a
// call by its deadline on the caller's own client, runs none of the hooks
// added to the client, before the copy was made or after, so the caller's
// telemetry and fault injection would not see the lock's calls. When this
// fails, a copy per call may be the cheaper bound: see "Client options" in
// docs/design.md.
func TestTimeoutCopyRunsNoHooks(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := b.Client(t)
		var n atomic.Int64
		c.AddHook(&countHook{n: &n})
		ctx := context.Background()
		if err := c.Ping(ctx).Err(); err != nil || n.Load() != 1 {
			t.Fatalf("the client's own ping: err %v, %d hooked, want 1", err, n.Load())
		}
		copied := c.WithTimeout(time.Second)
		if err := copied.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if got := n.Load() - 1; got != 0 {
			t.Fatalf("the copy ran the hook %d times: go-redis's WithTimeout now keeps hooks, and the engine may bound calls with it", got)
		}
	})
}
