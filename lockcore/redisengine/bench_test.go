package redisengine

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/background"
	"github.com/routelock/lock/internal/lifecycle"
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
							ls, err := l.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
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
							ls, err := l.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
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

// BenchmarkDeployments times one uncontended lock cycle on each real
// deployment of redistest.Deployments (one server, a Cluster of 3 masters
// with a replica each, a master with 2 replicas under Sentinel), with
// go-redis at its defaults: raw, a SET NX PX and a Lua compare-and-delete,
// the floor of any Redis lock; the Engine at its defaults (on Sentinel,
// replicas acknowledge); and, where the deployment has replicas, the
// Engine with Options.Replicas off and 1. par=P runs P goroutines
// per CPU (b.SetParallelism), each on a key of its own.
func BenchmarkDeployments(b *testing.B) {
	for _, be := range redistest.Deployments(b) {
		if !be.Real() {
			continue
		}
		kinds := []string{"raw", "engine"}
		if be.MultiNode() {
			kinds = append(kinds, "engine-replicas=0", "engine-replicas=1")
		}
		for _, kind := range kinds {
			for _, par := range []int{1, 16} {
				b.Run(be.Name+"/"+kind+"/par="+strconv.Itoa(par), func(b *testing.B) {
					rdb := be.Universal(b)
					prefix := redistest.Prefix(b)
					var l *Engine
					if kind != "raw" {
						opt := Options{Prefix: prefix}
						switch kind {
						case "engine-replicas=0":
							opt.Replicas = -1
						case "engine-replicas=1":
							opt.Replicas = 1
						}
						var err error
						if l, err = New(rdb, opt); err != nil {
							b.Fatal(err)
						}
						defer l.Close()
					}
					ctx := context.Background()
					var n atomic.Int64
					cycle := func(k string, key lockcore.Key) error {
						if l == nil {
							tok := strconv.FormatInt(n.Add(1), 36)
							ok, err := rdb.SetNX(ctx, prefix+k, tok, ttlForBench).Result()
							if err != nil || !ok {
								return fmt.Errorf("SET NX: %v %v", ok, err)
							}
							return rawDel.Run(ctx, rdb, []string{prefix + k}, tok).Err()
						}
						ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
						if err != nil {
							return err
						}
						return ls.Release(ctx)
					}
					b.ReportAllocs()
					b.SetParallelism(par)
					b.RunParallel(func(pb *testing.PB) {
						k := "d" + strconv.FormatInt(n.Add(1), 10)
						key := mustKey(b, k)
						for pb.Next() {
							if err := cycle(k, key); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		}
	}
}

// ttlForBench is the raw lock's TTL in BenchmarkDeployments.
const ttlForBench = 10 * time.Second

var rawDel = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkModes times lock cycles of each mode (lifecycle.Policy.Share) on
// a real Redis (or miniredis on a bare machine), go-redis at its defaults:
// an uncontended exclusive cycle on one key by one goroutine, the baseline;
// the same for a reader (ShareAll) and a permit (Share 4); and 64
// goroutines (b.SetParallelism over the CPUs) reading one key at once,
// whose cycles per second against the baseline's say what sharing costs.
func BenchmarkModes(b *testing.B) {
	be := redistest.Best(b)
	c := redis.NewClient(&redis.Options{Addr: be.Addr})
	defer c.Close()
	l, err := New(c, Options{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	cycle := func(b *testing.B, k lockcore.Key, p lifecycle.Policy) bool {
		ls, err := l.Acquire(ctx, k, p)
		if err == nil {
			err = ls.Release(ctx)
		}
		if err != nil {
			b.Error(err)
			return false
		}
		return true
	}
	for _, m := range []struct {
		name string
		p    lifecycle.Policy
		g    int // goroutines
	}{
		{"exclusive/g=1", lifecycle.Policy{}, 1},
		{"shared/g=1", lifecycle.Policy{Share: lifecycle.ShareAll}, 1},
		{"permits=4/g=1", lifecycle.Policy{Share: 4}, 1},
		{"shared/g=64", lifecycle.Policy{Share: lifecycle.ShareAll}, 64},
	} {
		b.Run(m.name, func(b *testing.B) {
			k := mustKey(b, "modes", m.name)
			b.ReportAllocs()
			if m.g == 1 {
				for b.Loop() {
					if !cycle(b, k, m.p) {
						return
					}
				}
				return
			}
			b.SetParallelism(max(1, m.g/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !cycle(b, k, m.p) {
						return
					}
				}
			})
		})
	}
}

// BenchmarkGatePropagation measures how long a gate closed on one Engine
// takes to close on two others with the same Prefix, each on a client of
// its own (three instances of a service): from CloseGate's return to the
// moment the last of them refuses the key from memory, polled without
// sleeping. It reports the median and the worst of the run.
func BenchmarkGatePropagation(b *testing.B) {
	be := redistest.Best(b)
	p := redistest.Prefix(b)
	engines := make([]*Engine, 3)
	for i := range engines {
		c := redis.NewClient(&redis.Options{Addr: be.Addr})
		b.Cleanup(func() { _ = c.Close() })
		l, err := New(c, Options{Prefix: p})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		engines[i] = l
	}
	ctx := context.Background()
	for _, l := range engines {
		if err := l.nf.ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var lat []time.Duration
	i := 0
	for b.Loop() {
		k := mustKey(b, "gate", strconv.Itoa(i))
		i++
		if err := engines[0].CloseGate(ctx, k, time.Minute); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, l := range engines[1:] {
			for {
				if _, closed := isClosed(l.GateOf(context.Background(), k)); closed {
					break
				}
				if time.Since(start) > 5*time.Second {
					b.Fatalf("gate %v not closed on every engine after 5s", k)
				}
				runtime.Gosched()
			}
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
	for j := range i {
		_ = engines[0].OpenGate(ctx, mustKey(b, "gate", strconv.Itoa(j)))
	}
}

// BenchmarkManyLeases holds 10,000 leases on one Engine at the default TTL
// (10 s), with a client at go-redis's defaults, and measures what keeping
// them costs: one op is a renewal round, every lease renewed once (about
// TTL/4 to TTL/3 of wall time). It reports, per round, the exchanges with
// Redis (trips/round: the pipelines the watchdog sent) and the renewals,
// and the CPU used meanwhile as a share of one core: this process's
// (client-cpu-%: getrusage, the watchdog and go-redis and all) and, on a
// redis-server of its own, the server's (redis-cpu-%: INFO cpu). Where no
// redis-server is on PATH it runs on miniredis, without redis-cpu-%.
func BenchmarkManyLeases(b *testing.B) {
	const leases = 10_000
	addr, infoCPU := ownServer(b)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var cmds, trips atomic.Int64
	c.AddHook(renewalCounter{cmds: &cmds, trips: &trips})
	l, err := New(c, Options{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()

	held := holdMany(b, leases, func(i int) (*lifecycle.Lease, error) {
		return l.Acquire(ctx, mustKey(b, "many", strconv.Itoa(i)), lifecycle.Policy{Wait: lockcore.FailFast})
	})

	redis0, cpu0, cmds0, trips0 := infoCPU(), processCPU(), cmds.Load(), trips.Load()
	b.ResetTimer()
	t0 := time.Now()
	for round := int64(1); b.Loop(); round++ {
		deadline := time.Now().Add(30 * time.Second)
		for cmds.Load()-cmds0 < round*leases {
			if time.Now().After(deadline) {
				b.Fatalf("round %d: %d renewals in 30 s, want %d", round, cmds.Load()-cmds0, round*leases)
			}
			time.Sleep(10 * time.Millisecond) // polling a count, bounded by the deadline
		}
	}
	wall := time.Since(t0)
	b.StopTimer()
	redis1, cpu1 := infoCPU(), processCPU()
	rounds := float64(b.N)
	b.ReportMetric(float64(cpu1-cpu0)/float64(wall)*100, "client-cpu-%")
	if redis0 >= 0 && redis1 >= 0 {
		b.ReportMetric((redis1-redis0)/wall.Seconds()*100, "redis-cpu-%")
	}
	b.ReportMetric(float64(trips.Load()-trips0)/rounds, "trips/round")
	b.ReportMetric(float64(cmds.Load()-cmds0)/rounds, "renewals/round")
	for _, ls := range held {
		if err := ls.Err(); err != nil {
			b.Fatalf("a lease was lost while held: %v", err)
		}
	}
}

// BenchmarkManyLeasesChurn holds 10,000 leases on one Engine at the
// default TTL, each taken with a route and a trace id as the middleware
// takes them, with a client at go-redis's defaults, and replaces 1,000 of
// them a second (every millisecond one is released and another taken):
// one op is a second of that. It reports the CPU used as a share of one
// core, by this process (client-cpu-%) and, on a redis-server of its own,
// by the server (redis-cpu-%), and the fields the Engine's record wrote
// per second (record-fields/s: fields set and deleted), which follow the
// churn, not the leases held.
func BenchmarkManyLeasesChurn(b *testing.B) {
	const leases, perSecond = 10_000, 1_000
	addr, infoCPU := ownServer(b)
	prefix := redistest.Prefix(b)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var set, del atomic.Int64
	c.AddHook(recordWrites{prefix: prefix + "engine:", set: &set, del: &del})
	l, err := New(c, Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	var made atomic.Int64
	take := func() (*lifecycle.Lease, error) {
		i := strconv.FormatInt(made.Add(1), 10)
		return l.Acquire(ctx, mustKey(b, "churn", i), lifecycle.Policy{Wait: lockcore.FailFast, Route: "/products/{id}", Trace: "t" + i})
	}
	held := holdMany(b, leases, func(int) (*lifecycle.Lease, error) { return take() })
	// The measurement begins once the record shows every hold (each once
	// it lasted recordEvery).
	for deadline := time.Now().Add(30 * time.Second); ; {
		if n, _ := c.HLen(ctx, l.recordKey(l.id)).Result(); n > leases {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the record does not show the %d holds within 30 s", leases)
		}
		time.Sleep(100 * time.Millisecond) // polling, bounded by the deadline
	}

	redis0, cpu0, fields0 := infoCPU(), processCPU(), set.Load()+del.Load()
	tick := time.NewTicker(time.Second / perSecond)
	defer tick.Stop()
	n := 0
	b.ResetTimer()
	t0 := time.Now()
	for b.Loop() {
		for range perSecond {
			<-tick.C
			i := n % leases // the oldest first
			n++
			if err := held[i].Release(ctx); err != nil {
				b.Fatal(err)
			}
			ls, err := take()
			if err != nil {
				b.Fatal(err)
			}
			held[i] = ls
		}
	}
	wall := time.Since(t0)
	b.StopTimer()
	redis1, cpu1 := infoCPU(), processCPU()
	b.ReportMetric(float64(cpu1-cpu0)/float64(wall)*100, "client-cpu-%")
	if redis0 >= 0 && redis1 >= 0 {
		b.ReportMetric((redis1-redis0)/wall.Seconds()*100, "redis-cpu-%")
	}
	b.ReportMetric(float64(set.Load()+del.Load()-fields0)/wall.Seconds(), "record-fields/s")
	b.ReportMetric(float64(n)/wall.Seconds(), "replaced/s")
	for _, ls := range held {
		if err := ls.Err(); err != nil {
			b.Fatalf("a lease was lost while held: %v", err)
		}
	}
}

// ownServer returns the address of a redis-server of the benchmark's own,
// stopped when b ends, and a func that reads the CPU time it has used in
// seconds; where no redis-server is on PATH, the address of miniredis and
// a func that returns -1.
func ownServer(b *testing.B) (addr string, infoCPU func() float64) {
	srv, err := redistest.Start()
	if err != nil {
		return redistest.Best(b).Addr, func() float64 { return -1 }
	}
	b.Cleanup(srv.Stop)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = admin.Close() })
	return srv.Addr, func() float64 { return redisCPU(b, admin) }
}

// holdMany takes n leases with take, 32 at a time, and releases them when
// b ends.
func holdMany(b *testing.B, n int, take func(i int) (*lifecycle.Lease, error)) []*lifecycle.Lease {
	held := make([]*lifecycle.Lease, n)
	var next atomic.Int64
	errs := make(chan error, 32)
	for range 32 {
		go func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				ls, err := take(i)
				if err != nil {
					errs <- err
					return
				}
				held[i] = ls
			}
			errs <- nil
		}()
	}
	for range 32 {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, ls := range held {
			_ = ls.Release(context.Background())
		}
	})
	return held
}

// processCPU returns the CPU time this process has used (getrusage).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// renewalCounter counts the commands a client sends in pipelines, and the
// pipelines: the watchdog's renewals, once the leases are taken (the
// engine's background reads are left out).
type renewalCounter struct{ cmds, trips *atomic.Int64 }

func (renewalCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (renewalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h renewalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !background.Marked(ctx) {
			h.trips.Add(1)
			h.cmds.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// redisCPU returns the CPU time the server has used, in seconds (INFO cpu:
// used_cpu_user + used_cpu_sys).
func redisCPU(tb testing.TB, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for line := range strings.SplitSeq(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatal(err)
			}
			sum += f
		}
	}
	return sum
}
