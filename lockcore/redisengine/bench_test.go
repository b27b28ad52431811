package redisengine

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// BenchmarkAcquireRelease times one uncontended Acquire and Release on a
// real Redis (or miniredis on a bare machine), with a client at go-redis's
// defaults, which ignores context deadlines, and with ContextTimeoutEnabled,
// whose calls leave from the caller's goroutine.
func BenchmarkAcquireRelease(b *testing.B) {
	be := redistest.Best(b)
	for _, cte := range []bool{false, true} {
		name := "defaults"
		if cte {
			name = "ctxdeadline"
		}
		b.Run(name, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: be.Addr, ContextTimeoutEnabled: cte})
			defer c.Close()
			l, err := New(c, Options{Prefix: redistest.Prefix(b)})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx := context.Background()
			for _, par := range []int{1, 16} {
				b.Run("g="+strconv.Itoa(par), func(b *testing.B) {
					b.ReportAllocs()
					b.SetParallelism(par)
					if par == 1 {
						k := mustKey(b, "serial")
						for b.Loop() {
							ls, err := l.Acquire(ctx, k, lockcore.Policy{Wait: lockcore.FailFast})
							if err != nil {
								b.Fatal(err)
							}
							if err := ls.Release(ctx); err != nil {
								b.Fatal(err)
							}
						}
						return
					}
					var n atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						k := mustKey(b, "p", strconv.Itoa(int(n.Add(1))))
						for pb.Next() {
							ls, err := l.Acquire(ctx, k, lockcore.Policy{Wait: lockcore.FailFast})
							if err != nil {
								b.Error(err)
								return
							}
							if err := ls.Release(ctx); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		})
	}
}
