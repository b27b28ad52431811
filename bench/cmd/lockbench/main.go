// Command lockbench runs routelock's lock engine beside other Go Redis lock
// libraries against one real Redis, in one run, and prints the medians of
// repeated runs as Markdown tables with ratios.
//
//	go run ./cmd/lockbench                  # starts its own redis-server
//	go run ./cmd/lockbench -addr 127.0.0.1:6379 -runs 5 -dur 2s
//
// Workloads: W1 uncontended acquire+release on distinct keys (1, 16, 64
// goroutines); W2 goroutines on one hot key with empty and 1 ms sections, in
// one process and spread over several; W3 hand-over latency from release to
// the next waiter holding, waiter in the same and in another process.
//
// With -json FILE it also writes every result (each run's value and the
// median, per workload, library and configuration, W2's per-waiter
// completions and fairness, W3's p50/p90/p99/max) and the run's metadata as
// JSON in the schema of package github.com/routelock/lock/bench/results,
// which cmd/lockchart draws. The text output is the same with or without it.
//
// W2's one-process rows with sections also show floor-publish, which is not a
// lock: its waiters queue in memory and each hand-over is one PUBLISH. It is
// the most a lock whose waiters learn of a hand-over from Redis can reach on
// the machine measured.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/bench"
	"github.com/routelock/lock/bench/results"
	"github.com/routelock/lock/internal/redisconf"
	"github.com/routelock/lock/internal/redistest"
)

func main() {
	if bench.EtcdMember() {
		return
	}
	defer bench.Down()
	var (
		addr     = flag.String("addr", "", "the single server's address (loopback); empty: start redis-server on a free port")
		deploys  = flag.String("deploy", bench.Single, "deployments to run on, comma-separated: single, cluster (3 masters with a replica each), sentinel (a master with 2 replicas under 3 sentinels); each is started on loopback unless -addr, -cluster-url or -sentinel-url names it")
		clURL    = flag.String("cluster-url", "", "the Cluster, as REDIS_CLUSTER_URL reads it (loopback); empty: start one")
		seURL    = flag.String("sentinel-url", "", "the Sentinel set-up, as REDIS_SENTINEL_URL reads it (loopback); empty: start one")
		runs     = flag.Int("runs", 5, "repetitions; medians are reported")
		dur      = flag.Duration("dur", 2*time.Second, "length of each W1/W2 measurement")
		handoffs = flag.Int("handoffs", 200, "hand-overs measured per W3 run")
		procs    = flag.Int("procs", 4, "processes for the multi-process W2")
		libsFlag = flag.String("libs", "", "comma-separated library names (default: all)")
		wFlag    = flag.String("w", "W1,W2,W3", "workloads to run")
		jsonPath = flag.String("json", "", "also write every result, per run and median, with the run's metadata to this file as JSON (schema: package bench/results)")
		comment  = flag.String("comment", "", "free text recorded in the -json metadata, e.g. the machine")
		child    = flag.Bool("child", false, "internal: run as a worker process")
		libName  = flag.String("lib", "", "internal: the worker's library")
		tVar     = flag.String("target-var", "", "internal: the worker's deployment variable")
		tURL     = flag.String("target-url", "", "internal: the worker's deployment URL")
	)
	flag.Parse()
	if *child {
		if err := runChild(*libName, bench.Target{Var: *tVar, URL: *tURL}); err != nil {
			fmt.Fprintln(os.Stderr, "lockbench child:", err)
			os.Exit(1)
		}
		return
	}
	meta := newMeta(flag.CommandLine, *runs, *comment)
	if *jsonPath != "" {
		if err := checkDir(*jsonPath); err != nil {
			fail(err)
		}
	}
	libs := bench.Libs()
	if *libsFlag != "" {
		libs = nil
		for _, n := range strings.Split(*libsFlag, ",") {
			l, err := bench.LibByName(strings.TrimSpace(n))
			if err != nil {
				fail(err)
			}
			libs = append(libs, l)
		}
	}
	ds := strings.Split(*deploys, ",")
	for _, d := range ds {
		if d != bench.Single && d != bench.Cluster && d != bench.Sentinel {
			fail(fmt.Errorf("-deploy: unknown deployment %q: want single, cluster or sentinel", d))
		}
	}
	for _, d := range ds {
		t, started, stop, err := deployment(d, *addr, *clURL, *seURL)
		if err != nil {
			fail(fmt.Errorf("%s: %w", d, err))
		}
		m := meta
		m.Deployment, m.RedisStarted, m.RedisVersion = d, started, redisVersion(t)
		var on []bench.Lib
		for _, l := range libs {
			if l.RunsOn(d) {
				on = append(on, l)
			}
		}
		if len(ds) > 1 {
			fmt.Printf("## %s\n\n", d)
		}
		err = runOn(t, on, *wFlag, *runs, *dur, *handoffs, *procs, m, jsonFile(*jsonPath, d, len(ds) > 1))
		stop()
		if err != nil {
			fail(fmt.Errorf("%s: %w", d, err))
		}
	}
}

// deployment returns the Target of deployment d: the one given by the
// flags, or one started on loopback, which stop stops.
func deployment(d, addr, clusterURL, sentinelURL string) (t bench.Target, started bool, stop func(), err error) {
	stop = func() {}
	switch d {
	case bench.Single:
		if addr != "" {
			return bench.ServerAt(addr), false, stop, nil
		}
		srv, err := redistest.Start()
		if err != nil {
			return t, false, stop, err
		}
		return bench.ServerAt(srv.Addr), true, srv.Stop, nil
	case bench.Cluster, bench.Sentinel:
		given, start := clusterURL, redistest.StartClusterSet
		if d == bench.Sentinel {
			given, start = sentinelURL, redistest.StartSentinelSet
		}
		if given != "" {
			v := redisconf.Cluster
			if d == bench.Sentinel {
				v = redisconf.Sentinel
			}
			return bench.Target{Var: v, URL: given}, false, stop, nil
		}
		fmt.Fprintf(os.Stderr, "lockbench: starting a %s on loopback\n", d)
		set, err := start()
		if err != nil {
			return t, false, stop, err
		}
		v, u := set.Backend(d).Env()
		return bench.Target{Var: v, URL: u}, true, set.Stop, nil
	}
	return t, false, stop, fmt.Errorf("unknown deployment %q", d)
}

// jsonFile is where the results of deployment d go: path, or with several
// deployments, path with ".<d>" before its extension.
func jsonFile(path, d string, several bool) string {
	if path == "" || !several {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "." + d + ext
}

// runOn runs the workloads ws of libs on t, prints the report and writes
// the JSON to jsonPath, if any.
func runOn(t bench.Target, libs []bench.Lib, ws string, runs int, dur time.Duration, handoffs, procs int, meta results.Meta, jsonPath string) error {
	r := &runner{target: t, dur: dur, handoffs: handoffs, procs: procs, res: map[string][]float64{}, perG: map[string][][]int64{}}
	meter, err := newServerMeter(t)
	if err != nil {
		return err
	}
	defer meter.close()
	r.meter = meter
	fmt.Fprintf(os.Stderr, "lockbench: %d runs on %s (%s), %v per measurement\n", runs, t.Deployment(), redisconf.Scrub(t.URL, t.URL), dur)
	for run := 1; run <= runs; run++ {
		for _, lib := range libs {
			fmt.Fprintf(os.Stderr, "run %d/%d %s\n", run, runs, lib.Name)
			if err := r.all(lib, ws, run); err != nil {
				// Recorded, and the run goes on: one library's failure
				// (a peer's errors, say) must not cost the others' numbers.
				fmt.Fprintf(os.Stderr, "lockbench: run %d %s failed: %v\n", run, lib.Name, err)
				r.failures = append(r.failures, results.Failure{Library: lib.Name, Run: run, Error: err.Error()})
			}
		}
	}
	r.report(os.Stdout, libs, ws, runs)
	if jsonPath != "" {
		if err := results.WriteFile(jsonPath, r.jsonReport(meta, libs, ws)); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "lockbench: results written to %s\n", jsonPath)
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "lockbench:", err)
	bench.Down()
	os.Exit(1)
}

type runner struct {
	target   bench.Target
	dur      time.Duration
	handoffs int
	procs    int
	res      map[string][]float64 // "lib|metric" -> one value per run
	perG     map[string][][]int64 // "lib|W2/config" -> per run, completions per goroutine
	failures []results.Failure
	meter    *serverMeter // nil unless the target is one server
}

func (r *runner) add(lib, metric string, v float64) {
	r.res[lib+"|"+metric] = append(r.res[lib+"|"+metric], v)
}

func (r *runner) median(lib, metric string) (float64, bool) {
	v := slices.Clone(r.res[lib+"|"+metric])
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	return v[len(v)/2], true
}

type w2Config struct {
	name       string
	goroutines int
	section    time.Duration
	multi      bool
}

var w2Configs = []w2Config{
	{"8x0", 8, 0, false},
	{"8x1ms", 8, time.Millisecond, false},
	{"64x0", 64, 0, false},
	{"64x1ms", 64, time.Millisecond, false},
	{"64x1ms-procs", 64, time.Millisecond, true},
}

// floor says whether the hand-over floor runs in this configuration: one
// process, sections long enough that every section ends in a hand-over.
func (c w2Config) floor() bool { return !c.multi && c.section > 0 }

func (r *runner) all(lib bench.Lib, ws string, run int) error {
	var cmds atomic.Int64
	m, err := lib.New(r.target, &cmds)
	if err != nil {
		return err
	}
	defer m.Close()
	tag := fmt.Sprintf("%d-%d", run, time.Now().UnixNano())
	if strings.Contains(ws, "W1") && !lib.Floor {
		for _, g := range []int{1, 16, 64} {
			before, berr := r.meter.counters()
			res := bench.RunW1(m, g, r.dur, "w1-"+tag)
			after, aerr := r.meter.counters()
			if res.Errors > 0 {
				// Not a rate to compare: recorded as a failure, and the
				// other workloads still run.
				r.failures = append(r.failures, results.Failure{Library: lib.Name, Run: run, Error: fmt.Sprintf("W1 %d goroutines: %d errors", g, res.Errors)})
				continue
			}
			metric := fmt.Sprintf("W1/%d", g)
			r.add(lib.Name, metric, res.PerSec())
			if r.meter != nil && berr == nil && aerr == nil && res.Cycles > 0 {
				n := float64(res.Cycles)
				r.add(lib.Name, metric+"/cpu", (after.cpu-before.cpu)*1e6/n)
				r.add(lib.Name, metric+"/commands", float64(after.calls-before.calls)/n)
			} else if berr != nil || aerr != nil {
				r.failures = append(r.failures, results.Failure{Library: lib.Name, Run: run, Error: fmt.Sprintf("W1 %d goroutines: the server's counters: %v", g, errors.Join(berr, aerr))})
			}
		}
	}
	if strings.Contains(ws, "W2") {
		for _, c := range w2Configs {
			if lib.Floor && !c.floor() {
				continue
			}
			key := "w2-" + c.name + "-" + tag
			var res bench.W2Result
			cmds.Store(0)
			if c.multi {
				res, err = r.multiW2(lib, c.goroutines, c.section, key)
				if err != nil {
					return err
				}
			} else {
				res = bench.RunW2(m, c.goroutines, c.section, r.dur, key)
				res.Cmds = cmds.Load()
			}
			r.addW2(lib.Name, c, res)
		}
	}
	if strings.Contains(ws, "W3") && !lib.Floor {
		var wc atomic.Int64
		waiter, err := lib.New(r.target, &wc)
		if err != nil {
			return err
		}
		hs, err := bench.RunW3Local(m, waiter, r.handoffs, 2*time.Millisecond, "w3-"+tag)
		waiter.Close()
		if err != nil {
			return fmt.Errorf("W3 local: %w", err)
		}
		r.addW3(lib.Name, "W3/local", hs)
		if hs, err = bench.RunW3Local(m, m, r.handoffs, 2*time.Millisecond, "w3s-"+tag); err != nil {
			return fmt.Errorf("W3 same instance: %w", err)
		}
		r.addW3(lib.Name, "W3/same", hs)
		hs, err = r.remoteW3(lib, m, "w3r-"+tag)
		if err != nil {
			return fmt.Errorf("W3 remote: %w", err)
		}
		r.addW3(lib.Name, "W3/remote", hs)
	}
	return nil
}

// addW2 records one run of W2 configuration c.
func (r *runner) addW2(p string, c w2Config, res bench.W2Result) {
	n := "W2/" + c.name
	r.add(p, n+"/rate", res.PerSec())
	if ideal := res.Ideal(); ideal > 0 {
		r.add(p, n+"/ideal", res.PerSec()/ideal)
	}
	r.add(p, n+"/p50", ms(res.Wait(0.5)))
	r.add(p, n+"/p99", ms(res.Wait(0.99)))
	r.add(p, n+"/max", ms(res.Wait(1)))
	r.add(p, n+"/fair", res.Fairness())
	r.add(p, n+"/minmax", float64(slices.Min(res.PerG))*1e6+float64(slices.Max(res.PerG)))
	r.add(p, n+"/minc", float64(slices.Min(res.PerG)))
	r.add(p, n+"/maxc", float64(slices.Max(res.PerG)))
	r.add(p, n+"/jain", res.Jain())
	r.perG[p+"|"+n] = append(r.perG[p+"|"+n], slices.Clone(res.PerG))
	if res.Sections > 0 {
		r.add(p, n+"/cmds", float64(res.Cmds)/float64(res.Sections))
	}
	r.add(p, n+"/errors", float64(res.Errors))
}

// addW3 records the quantiles of one run's hand-over latencies.
func (r *runner) addW3(lib, n string, hs []time.Duration) {
	r.add(lib, n+"/p50", ms(bench.Quantile(hs, 0.5)))
	r.add(lib, n+"/p90", ms(bench.Quantile(hs, 0.9)))
	r.add(lib, n+"/p99", ms(bench.Quantile(hs, 0.99)))
	r.add(lib, n+"/max", ms(bench.Quantile(hs, 1)))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// --- worker processes

type request struct {
	Op         string        `json:"op"`
	Key        string        `json:"key"`
	Goroutines int           `json:"goroutines,omitempty"`
	Section    time.Duration `json:"section,omitempty"`
	Dur        time.Duration `json:"dur,omitempty"`
}

type reply struct {
	Ready    bool            `json:"ready,omitempty"`
	Waiting  bool            `json:"waiting,omitempty"`
	Acquired int64           `json:"acquired,omitempty"` // unix ns
	Released bool            `json:"released,omitempty"`
	W2       *bench.W2Result `json:"w2,omitempty"`
	Err      string          `json:"err,omitempty"`
}

type worker struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *json.Decoder
	enc *json.Encoder
}

func startWorker(lib string, t bench.Target) (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-child", "-lib", lib, "-target-var", t.Var, "-target-url", t.URL)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &worker{cmd: cmd, in: in, out: json.NewDecoder(bufio.NewReader(out)), enc: json.NewEncoder(in)}
	var rp reply
	if err := w.out.Decode(&rp); err != nil || !rp.Ready {
		w.stop()
		return nil, fmt.Errorf("worker did not start: %v %s", err, rp.Err)
	}
	return w, nil
}

func (w *worker) stop() {
	_ = w.in.Close()
	_ = w.cmd.Wait()
}

func (w *worker) read() (reply, error) {
	var rp reply
	if err := w.out.Decode(&rp); err != nil {
		return rp, err
	}
	if rp.Err != "" {
		return rp, fmt.Errorf("worker: %s", rp.Err)
	}
	return rp, nil
}

func (r *runner) multiW2(lib bench.Lib, goroutines int, section time.Duration, key string) (bench.W2Result, error) {
	var ws []*worker
	defer func() {
		for _, w := range ws {
			w.stop()
		}
	}()
	for range r.procs {
		w, err := startWorker(lib.Name, r.target)
		if err != nil {
			return bench.W2Result{}, err
		}
		ws = append(ws, w)
	}
	for _, w := range ws {
		if err := w.enc.Encode(request{Op: "w2", Key: key, Goroutines: goroutines / r.procs, Section: section, Dur: r.dur}); err != nil {
			return bench.W2Result{}, err
		}
	}
	var total bench.W2Result
	for _, w := range ws {
		rp, err := w.read()
		if err != nil {
			return bench.W2Result{}, err
		}
		total.Merge(*rp.W2)
	}
	return total, nil
}

func (r *runner) remoteW3(lib bench.Lib, holder bench.Mutexer, key string) ([]time.Duration, error) {
	w, err := startWorker(lib.Name, r.target)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	out := make([]time.Duration, 0, r.handoffs)
	for range r.handoffs {
		d, err := handOverRemote(holder, w, key)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// handOverRemote measures one hand-over of remoteW3 from holder to the
// worker w. The holder's acquisition is bounded by bench.W3Wait, as in
// bench.RunW3Local, and so is the worker's (see runChild).
func handOverRemote(holder bench.Mutexer, w *worker, key string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctxBG, bench.W3Wait)
	defer cancel()
	unlock, err := holder.Lock(ctx, key, true)
	if err != nil {
		return 0, err
	}
	if err := w.enc.Encode(request{Op: "lock", Key: key}); err != nil {
		unlock()
		return 0, err
	}
	if _, err := w.read(); err != nil { // waiting
		unlock()
		return 0, err
	}
	time.Sleep(2 * time.Millisecond) // let the waiter block: the scenario, not synchronisation
	rel := time.Now()
	unlock()
	rp, err := w.read()
	if err != nil {
		return 0, err
	}
	if _, err := w.read(); err != nil { // released
		return 0, err
	}
	return time.Unix(0, rp.Acquired).Sub(rel), nil
}

func runChild(libName string, t bench.Target) error {
	lib, err := bench.LibByName(libName)
	if err != nil {
		return err
	}
	var cmds atomic.Int64
	m, err := lib.New(t, &cmds)
	if err != nil {
		return err
	}
	defer m.Close()
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(reply{Ready: true}); err != nil {
		return err
	}
	dec := json.NewDecoder(bufio.NewReader(os.Stdin))
	for {
		var rq request
		if err := dec.Decode(&rq); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		switch rq.Op {
		case "w2":
			cmds.Store(0)
			res := bench.RunW2(m, rq.Goroutines, rq.Section, rq.Dur, rq.Key)
			res.Cmds = cmds.Load()
			_ = enc.Encode(reply{W2: &res})
		case "lock":
			_ = enc.Encode(reply{Waiting: true})
			ctx, cancel := context.WithTimeout(ctxBG, bench.W3Wait)
			unlock, err := m.Lock(ctx, rq.Key, true)
			if err != nil {
				cancel()
				_ = enc.Encode(reply{Err: err.Error()})
				continue
			}
			t := time.Now()
			_ = enc.Encode(reply{Acquired: t.UnixNano()})
			unlock()
			cancel()
			_ = enc.Encode(reply{Released: true})
		default:
			return fmt.Errorf("unknown op %q", rq.Op)
		}
	}
}
