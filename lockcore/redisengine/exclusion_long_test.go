//go:build long

package redisengine

// The exclusion checker at full load (go test -tags long), which CI runs.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestExclusion runs 64 goroutines over 4 Lockers with separate clients on one
// key. Inside each section a racy read-modify-write and an occupancy counter
// would expose any overlap; fencing tokens must grow in hold order.
func TestExclusion(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		lockers := make([]*Engine, 4)
		for i := range lockers {
			lockers[i] = newLocker(t, b, prefix, Options{})
		}
		const goroutines, perG = 64, 160 // 10,240 sections
		key := mustKey(t, "productID", "42")
		var (
			inside, overlaps atomic.Int32
			racy             int // written without synchronisation but the lock
			lastFence        int64
			fenceErrs        int
			wg               sync.WaitGroup
			errs             = make(chan error, goroutines)
		)
		for g := range goroutines {
			wg.Add(1)
			go func(l, peer *Engine) {
				defer wg.Done()
				for i := range perG {
					ls, err := l.Acquire(context.Background(), key, lifecycle.Policy{Wait: 30 * time.Second})
					if err != nil {
						errs <- err
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					v := racy
					if ls.Fence() <= lastFence {
						fenceErrs++
					}
					lastFence = ls.Fence()
					// Nested calls for the same request re-enter: in this
					// process through the lease's context, and in another
					// "service" through the propagated token.
					var nested *lifecycle.Lease
					switch i % 8 {
					case 0:
						nested, err = l.Acquire(ls.Context(), key, lifecycle.Policy{Wait: lockcore.FailFast})
					case 1:
						nested, err = peer.Acquire(enginetest.WithToken(context.Background(), ls.Token()), key, lifecycle.Policy{Wait: lockcore.FailFast})
					}
					if err != nil {
						errs <- fmt.Errorf("nested: %w", err)
						return
					}
					if nested != nil {
						if nested.Fence() != ls.Fence() {
							errs <- fmt.Errorf("nested fence %d, hold's %d", nested.Fence(), ls.Fence())
							return
						}
						if err := nested.Release(context.Background()); err != nil {
							errs <- err
							return
						}
					}
					racy = v + 1
					inside.Add(-1)
					if err := ls.Release(context.Background()); err != nil {
						errs <- err
						return
					}
				}
			}(lockers[g%len(lockers)], lockers[(g+1)%len(lockers)])
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := overlaps.Load(); n != 0 {
			t.Fatalf("%d overlapping sections", n)
		}
		if racy != goroutines*perG {
			t.Fatalf("counter = %d, want %d", racy, goroutines*perG)
		}
		if fenceErrs != 0 {
			t.Fatalf("%d fencing tokens not greater than the previous hold's", fenceErrs)
		}
		if info := inspect(t, lockers[0], key); (len(info.Holders) > 0) || len(info.Waiters) != 0 {
			t.Fatalf("after all releases: %+v", info)
		}
	})
}
