package redistest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Instant is a go-redis hook that answers the engine's scripts, PING, INFO
// and its read of the closed gates without a network: acquire grants fencing token 1, release reports
// the lock freed, and the server evicts nothing. Behind it, benchmarks time the CPU that the middleware or
// interceptor, the engine and the client's command building spend on a
// request, without the round trips.
type Instant struct{}

// DialHook passes dials through.
func (Instant) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook passes pipelines through.
func (Instant) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook answers EVALSHA, PING, INFO and HGETALL.
func (Instant) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch c := cmd.(type) {
		case *redis.IntCmd: // acquire
			if c.Name() == "evalsha" {
				c.SetVal(1)
				return nil
			}
		case *redis.Cmd: // release
			if c.Name() == "evalsha" {
				c.SetVal(int64(0))
				return nil
			}
		case *redis.StatusCmd:
			if c.Name() == "ping" {
				c.SetVal("PONG")
				return nil
			}
		case *redis.MapStringStringCmd: // the engine's read of the closed gates: none
			if c.Name() == "hgetall" {
				c.SetVal(map[string]string{})
				return nil
			}
		case *redis.StringCmd: // the engine's read of the server's settings
			if c.Name() == "info" {
				c.SetVal("# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n")
				return nil
			}
		}
		return next(ctx, cmd)
	}
}

// InstantClient returns a client whose scripts and PINGs Instant answers;
// it never dials (its address is a closed loopback port). Closed at the end
// of the test.
func InstantClient(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	c.AddHook(Instant{})
	tb.Cleanup(func() { c.Close() })
	return c
}
