package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/background"
)

// Trips is a go-redis hook that counts a client's exchanges with a
// server: a command alone, or a pipeline, leaving out a new connection's
// handshake and the engine's background reads (package background). Added to each node's client of a Cluster (CountTrips), it
// counts exchanges with every node.
type Trips struct{ n atomic.Int64 }

// N returns the exchanges counted.
func (h *Trips) N() int64 { return h.n.Load() }

// Reset sets the count to 0.
func (h *Trips) Reset() { h.n.Store(0) }

// DialHook passes dials through.
func (h *Trips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts a command, unless it is a handshake's.
func (h *Trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) && !background.Marked(ctx) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline, unless it is a handshake's.
func (h *Trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if !handshake(cmd) && !background.Marked(ctx) {
				h.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "select", "auth", "readonly":
		return true
	}
	return false
}

// CountTrips adds h to c: to each node's client on a Cluster. It must run
// before c's first command.
func CountTrips(c redis.UniversalClient, h *Trips) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
		return
	}
	c.AddHook(h)
}
