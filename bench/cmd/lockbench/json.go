package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/bench"
	"github.com/routelock/lock/bench/results"
)

// baseline is the library ratios are to.
const baseline = "raw-1ms"

// newMeta describes this process and the flags of fs as given, before the
// run.
func newMeta(fs *flag.FlagSet, runs int, comment string) results.Meta {
	flags := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "child" && f.Name != "lib" { // internal to worker processes
			flags[f.Name] = f.Value.String()
		}
	})
	return results.Meta{
		Date:       time.Now().UTC().Truncate(time.Second),
		GoVersion:  runtime.Version(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Runs:       runs,
		Baseline:   baseline,
		Flags:      flags,
		Comment:    comment,
	}
}

// checkDir fails early, before a long run, when path's directory does not
// exist.
func checkDir(path string) error {
	fi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("-json: %s is not a directory", filepath.Dir(path))
	}
	return nil
}

// redisVersion asks a server of t its version; empty if it cannot tell.
func redisVersion(t bench.Target) string {
	var n atomic.Int64
	c, err := t.Client(0, false, &n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench: reading the Redis version:", err)
		return ""
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctxBG, 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench: reading the Redis version:", err)
		return ""
	}
	return parseRedisVersion(info)
}

// parseRedisVersion finds redis_version in the text of INFO.
func parseRedisVersion(info string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return ""
}

// stat returns the Stat of lib's metric, or nil when no run produced it.
func (r *runner) stat(lib, metric string) *results.Stat {
	return results.NewStat(r.res[lib+"|"+metric])
}

// statOrEmpty returns the Stat of lib's metric, with no runs when no run
// produced it.
func (r *runner) statOrEmpty(lib, metric string) results.Stat {
	if s := r.stat(lib, metric); s != nil {
		return *s
	}
	return results.Stat{Runs: []float64{}}
}

// ratio returns lib's median of metric over the baseline's, as the text
// tables print it, or nil.
func (r *runner) ratio(lib, metric string) *float64 {
	v, ok1 := r.median(lib, metric)
	b, ok2 := r.median(baseline, metric)
	if !ok1 || !ok2 || b == 0 {
		return nil
	}
	x := v / b
	return &x
}

// jsonReport gathers every result of the run, in the order the text report
// prints them.
func (r *runner) jsonReport(meta results.Meta, libs []bench.Lib, ws string) *results.Report {
	rep := &results.Report{Schema: results.SchemaVersion, Meta: meta, Failures: r.failures}
	for _, w := range []string{"W1", "W2", "W3"} {
		if strings.Contains(ws, w) {
			rep.Meta.Workloads = append(rep.Meta.Workloads, w)
		}
	}
	for _, l := range libs {
		rep.Libraries = append(rep.Libraries, results.Library{Name: l.Name, Note: l.Note, Floor: l.Floor})
	}
	for _, l := range libs {
		for _, g := range []int{1, 16, 64} {
			m := fmt.Sprintf("W1/%d", g)
			if s := r.stat(l.Name, m); s != nil {
				rep.W1 = append(rep.W1, results.W1Row{Library: l.Name, Goroutines: g, CyclesPerSec: *s, RatioToBaseline: r.ratio(l.Name, m),
					ServerCPUMicros: r.stat(l.Name, m+"/cpu"), ServerCommands: r.stat(l.Name, m+"/commands")})
			}
		}
	}
	for _, c := range w2Configs {
		n := "W2/" + c.name
		goroutines, processes := c.goroutines, 1
		if c.multi {
			goroutines, processes = c.goroutines/r.procs*r.procs, r.procs
		}
		for _, l := range libs {
			rate := r.stat(l.Name, n+"/rate")
			if rate == nil {
				continue
			}
			get := func(m string) results.Stat { return r.statOrEmpty(l.Name, n+"/"+m) }
			rep.W2 = append(rep.W2, results.W2Row{
				Library:              l.Name,
				Config:               c.name,
				Goroutines:           goroutines,
				SectionMs:            ms(c.section),
				Processes:            processes,
				SectionsPerSec:       *rate,
				RatioToBaseline:      r.ratio(l.Name, n+"/rate"),
				OfIdeal:              r.stat(l.Name, n+"/ideal"),
				WaitP50Ms:            get("p50"),
				WaitP99Ms:            get("p99"),
				WaitMaxMs:            get("max"),
				MinMaxShare:          get("fair"),
				JainIndex:            get("jain"),
				MinCompletions:       get("minc"),
				MaxCompletions:       get("maxc"),
				PerWaiterCompletions: r.perG[l.Name+"|"+n],
				CmdsPerSection:       r.stat(l.Name, n+"/cmds"),
				Errors:               get("errors"),
			})
		}
	}
	for _, l := range libs {
		for _, w := range []struct{ key, waiter string }{{"local", results.SameProcess}, {"remote", results.OtherProcess}, {"same", results.SameInstance}} {
			n := "W3/" + w.key
			p50 := r.stat(l.Name, n+"/p50")
			if p50 == nil {
				continue
			}
			get := func(m string) results.Stat { return r.statOrEmpty(l.Name, n+"/"+m) }
			rep.W3 = append(rep.W3, results.W3Row{Library: l.Name, Waiter: w.waiter, HandOvers: r.handoffs,
				P50Ms: *p50, P90Ms: get("p90"), P99Ms: get("p99"), MaxMs: get("max")})
		}
	}
	return rep
}
