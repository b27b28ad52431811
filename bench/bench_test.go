package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

var addr string

func TestMain(m *testing.M) {
	if EtcdMember() {
		return
	}
	addr = os.Getenv("REDIS_ADDR")
	var srv *redistest.Server
	if addr == "" {
		var err error
		if srv, err = redistest.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "bench needs a real Redis: set REDIS_ADDR or put redis-server on PATH:", err)
			os.Exit(1)
		}
		addr = srv.Addr
	}
	code := m.Run()
	Down()
	if srv != nil {
		srv.Stop()
	}
	os.Exit(code)
}

func newMutexer(tb testing.TB, lib Lib) (Mutexer, *atomic.Int64) {
	tb.Helper()
	var cmds atomic.Int64
	m, err := lib.New(ServerAt(addr), &cmds)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(m.Close)
	return m, &cmds
}

// BenchmarkW1 is one uncontended acquire+release cycle on a key of the
// goroutine's own, per library, at 1, 16 and 64 goroutines.
func BenchmarkW1(b *testing.B) {
	for _, lib := range Libs() {
		if lib.Floor || !lib.RunsOn(Single) {
			continue // not a lock between processes (W1 would not touch Redis), or not for one server
		}
		for _, g := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/g=%d", lib.Name, g), func(b *testing.B) {
				m, cmds := newMutexer(b, lib)
				var id atomic.Int64
				tag := strconv.FormatInt(time.Now().UnixNano(), 36)
				b.ResetTimer()
				if g == 1 {
					for i := 0; i < b.N; i++ {
						unlock, err := m.Lock(b.Context(), "w1-"+tag, false)
						if err != nil {
							b.Fatal(err)
						}
						unlock()
					}
				} else {
					b.SetParallelism((g + 1) / 2) // GOMAXPROCS=2 on the target machines
					b.RunParallel(func(pb *testing.PB) {
						k := "w1-" + tag + "-" + strconv.FormatInt(id.Add(1), 10)
						for pb.Next() {
							unlock, err := m.Lock(b.Context(), k, false)
							if err != nil {
								b.Error(err)
								return
							}
							unlock()
						}
					})
				}
				b.ReportMetric(float64(cmds.Load())/float64(b.N), "cmds/op")
			})
		}
	}
}

// TestWorkloadsSmoke runs every workload briefly for every library, checking
// that each completes sections and reports sane numbers.
func TestWorkloadsSmoke(t *testing.T) {
	for _, lib := range Libs() {
		if !lib.RunsOn(Single) {
			continue // the Redis here is one server; TestTargetDatabases checks what runs where
		}
		t.Run(lib.Name, func(t *testing.T) {
			m, cmds := newMutexer(t, lib)
			tag := strconv.FormatInt(time.Now().UnixNano(), 36)
			if lib.Floor {
				// W2 in one process is the only workload it runs: every
				// hand-over is one PUBLISH, and nothing else reaches Redis.
				r := RunW2(m, 4, time.Millisecond, 300*time.Millisecond, "smoke2-"+tag)
				if r.Sections == 0 || r.Errors != 0 || cmds.Load() > r.Sections {
					t.Fatalf("W2: %d sections, %d errors, %d commands", r.Sections, r.Errors, cmds.Load())
				}
				return
			}
			if r := RunW1(m, 4, 100*time.Millisecond, "smoke1-"+tag); r.Cycles == 0 || r.Errors != 0 {
				t.Fatalf("W1: %+v", r)
			}
			r := RunW2(m, 4, time.Millisecond, 300*time.Millisecond, "smoke2-"+tag)
			if r.Sections == 0 || r.Errors != 0 {
				t.Fatalf("W2: %d sections, %d errors", r.Sections, r.Errors)
			}
			w, _ := newMutexer(t, lib)
			hs, err := RunW3Local(m, w, 5, time.Millisecond, "smoke3-"+tag)
			if err != nil || len(hs) != 5 {
				t.Fatalf("W3: %v %v", hs, err)
			}
		})
	}
}

// TestFloorExcludes checks that the hand-over floor, which W2 compares the
// locks with, is itself a mutex among one process's goroutines: 16 goroutines
// take it 50 times each and a counter inside never sees another holder.
func TestFloorExcludes(t *testing.T) {
	lib, err := LibByName("floor-publish")
	if err != nil {
		t.Fatal(err)
	}
	m, cmds := newMutexer(t, lib)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var inside, overlaps, sections atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				unlock, err := m.Lock(ctx, "floor", true)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				runtime.Gosched()
				inside.Add(-1)
				sections.Add(1)
				unlock()
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 || sections.Load() != 16*50 {
		t.Fatalf("%d overlaps in %d sections", overlaps.Load(), sections.Load())
	}
	if n := cmds.Load(); n == 0 || n >= 16*50 {
		t.Fatalf("%d PUBLISHes for %d sections: want one per hand-over, none when the key was free", n, 16*50)
	}
}

// TestW2Fairness checks min/max share and Jain's index on completions per
// goroutine that are equal, skewed and starved.
func TestW2Fairness(t *testing.T) {
	for _, c := range []struct {
		perG         []int64
		minMax, jain float64
	}{
		{[]int64{5, 5, 5, 5}, 1, 1},
		{[]int64{0, 0, 0, 8}, 0, 0.25},
		{[]int64{1, 3}, 1.0 / 3, 16.0 / 20},
		{[]int64{0, 0}, 0, 0},
		{nil, 0, 0},
	} {
		r := W2Result{PerG: c.perG}
		if f, j := r.Fairness(), r.Jain(); f != c.minMax || math.Abs(j-c.jain) > 1e-12 {
			t.Errorf("%v: min/max %v Jain %v, want %v %v", c.perG, f, j, c.minMax, c.jain)
		}
	}
}

// BenchmarkModes is routelock's lock cycle in each mode
// (lifecycle.Policy.Share) on one server, go-redis at its defaults:
// exclusive on one key by one goroutine (W1 at g=1, the baseline);
// a reader and a permit of 4 the same way; and 64 goroutines reading one
// key at once, whose cycles per second against the baseline's say what
// sharing costs. No Go peer has readers or permits to compare with.
func BenchmarkModes(b *testing.B) {
	for _, m := range []struct {
		name  string
		share int
		g     int
	}{
		{"exclusive/g=1", 0, 1},
		{"shared/g=1", lifecycle.ShareAll, 1},
		{"permits=4/g=1", 4, 1},
		{"shared/g=64", lifecycle.ShareAll, 64},
	} {
		b.Run(m.name, func(b *testing.B) {
			l, cmds, _ := defaultEngine(b, "bench:modes:")
			k, err := lockcore.NewKey("modes", strconv.FormatInt(time.Now().UnixNano(), 36))
			if err != nil {
				b.Fatal(err)
			}
			p := lifecycle.Policy{Wait: time.Minute, Share: m.share}
			cycle := func() error {
				ls, err := lifecycle.Serve(l, nil).Acquire(b.Context(), k, p)
				if err != nil {
					return err
				}
				return ls.Release(b.Context())
			}
			b.ReportAllocs()
			b.ResetTimer()
			cmds.Store(0)
			if m.g == 1 {
				for i := 0; i < b.N; i++ {
					if err := cycle(); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism((m.g + 1) / 2) // GOMAXPROCS=2 on the target machines
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := cycle(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.ReportMetric(float64(cmds.Load())/float64(b.N), "cmds/op")
		})
	}
}

// BenchmarkSeveral is routelock's cycle over several resources on one
// server (lifecycle.AcquireAll and ReleaseAll, as a route naming them with
// keyfunc.Func.Also does), go-redis at its defaults, one goroutine: one
// key (W1, the baseline); two keys taken together (the group script, one
// exchange each way); and the same two keys one by one, as the engine
// takes them when they cannot go together (keys in different slots of a
// Cluster). trips/op counts exchanges with Redis: a command alone or a
// pipeline.
func BenchmarkSeveral(b *testing.B) {
	for _, m := range []struct {
		name     string
		keys     int
		together bool
	}{
		{"1 key", 1, true},
		{"2 keys together", 2, true},
		{"2 keys one by one", 2, false},
	} {
		b.Run(m.name, func(b *testing.B) {
			l, cmds, trips := defaultEngine(b, "bench:several:")
			var e lifecycle.Locker = lifecycle.Serve(l, nil)
			if !m.together {
				e = struct{ lifecycle.Locker }{lifecycle.Serve(l, nil)} // hides AcquireGroup
			}
			run := strconv.FormatInt(time.Now().UnixNano(), 36)
			keys := make([]lockcore.Key, m.keys)
			for i := range keys {
				var err error
				if keys[i], err = lockcore.NewKey("several", run, strconv.Itoa(i)); err != nil {
					b.Fatal(err)
				}
			}
			p := lifecycle.Policy{Wait: time.Minute}
			cycle := func() error {
				ls, err := lifecycle.AcquireAll(b.Context(), e, keys, p)
				if err != nil {
					return err
				}
				return lifecycle.ReleaseAll(b.Context(), ls)
			}
			for range 2 { // reads the server's settings, loads the scripts
				if err := cycle(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			cmds.Store(0)
			trips.Reset()
			for i := 0; i < b.N; i++ {
				if err := cycle(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cmds.Load())/float64(b.N), "cmds/op")
			b.ReportMetric(float64(trips.N())/float64(b.N), "trips/op")
		})
	}
}

// defaultEngine returns an Engine with prefix on a client of the server at
// go-redis's defaults, closed when b ends, and the counts of the client's
// commands and exchanges with Redis.
func defaultEngine(b *testing.B, prefix string) (*redisengine.Engine, *atomic.Int64, *redistest.Trips) {
	b.Helper()
	cmds := new(atomic.Int64)
	rdb, err := ServerAt(addr).Client(0, false, cmds)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rdb.Close() })
	trips := &redistest.Trips{}
	rdb.AddHook(trips)
	l, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix, TTL: TTL})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l, cmds, trips
}
