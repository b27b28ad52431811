package etcdengine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
)

// TestReadersWritersUnderLoad: 24 goroutines on three engines (three
// processes to etcd) take one key twelve times each as readers, as
// writers, and as writers that give up after a few milliseconds (the
// waiters whose going a writer behind them must not take for a grant); a
// shared checker, judged by each holder's context, finds no holder beside
// a writer, and readers that share. The same load on engines that take a
// predecessor's going for a grant (grantOnDelete) makes the checker find
// overlaps, so it would catch that.
func TestReadersWritersUnderLoad(t *testing.T) {
	t.Run("engine", func(t *testing.T) {
		if n := readersWriters(t, ""); n != 0 {
			t.Errorf("%d holders beside a writer", n)
		}
	})
	t.Run("grantOnDelete", func(t *testing.T) {
		if n := readersWriters(t, "grantOnDelete"); n == 0 {
			t.Error("the planted defect put no holder beside a writer: the checker does not catch it")
		}
	})
}

// readersWriters runs the load of TestReadersWritersUnderLoad on engines
// with defect planted, and returns the holders found beside a writer.
func readersWriters(t *testing.T, defect string) int64 {
	cli := startEtcd(t)
	var lockers []*lock.Locker
	for range 3 {
		e, err := New(cli, Options{Prefix: "readers/", TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		e.defect = defect
		t.Cleanup(func() { _ = e.Close() })
		lockers = append(lockers, lock.FromEngine(e))
	}
	k, _ := lockcore.NewKey("productID", "7")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		writers, readers                    atomic.Int64 // inside
		overlaps, sections, gaveUp, sharing atomic.Int64
		wg                                  sync.WaitGroup
	)
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[g%len(lockers)]
			for round := range 12 {
				var p lock.Policy
				switch {
				case g%4 == 0:
					p = lock.Wait(30 * time.Second)
				case g%4 == 1 && round%2 == 0:
					p = lock.Wait(3 * time.Millisecond) // often gives up
				default:
					p = lock.Shared()
					p.Wait = 30 * time.Second
				}
				ls, err := l.Acquire(ctx, k, p)
				if err != nil {
					if errors.Is(err, lockcore.ErrWaitTimeout) && p.Wait < time.Second {
						gaveUp.Add(1)
						continue
					}
					t.Error(err)
					return
				}
				if p.Share == 0 {
					if writers.Add(1) != 1 || readers.Load() != 0 {
						if ls.Context().Err() == nil {
							overlaps.Add(1)
						}
					}
				} else {
					if n := readers.Add(1); n > 1 {
						sharing.Add(1)
					}
					if writers.Load() != 0 && ls.Context().Err() == nil {
						overlaps.Add(1)
					}
				}
				select { // the section's work
				case <-ls.Context().Done():
				case <-time.After(time.Millisecond):
				}
				if p.Share == 0 {
					writers.Add(-1)
				} else {
					readers.Add(-1)
				}
				sections.Add(1)
				_ = ls.Release(ctx)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d sections, %d waits given up, %d reader entries beside another reader", sections.Load(), gaveUp.Load(), sharing.Load())
	if sharing.Load() == 0 {
		t.Error("no reader ever held beside another: readers do not share")
	}
	if gaveUp.Load() == 0 {
		t.Error("no writer gave up waiting: the case of a waiter that leaves was not exercised")
	}
	return overlaps.Load()
}
