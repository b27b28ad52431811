package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routelock/lock/bench"
	"github.com/routelock/lock/bench/results"
)

// fakeRun records two runs of every workload for routelock, raw-1ms and
// floor-publish through the runner's own recording functions, from made-up
// workload results: no Redis, no measurement.
func fakeRun(t *testing.T) (*runner, []bench.Lib) {
	t.Helper()
	var libs []bench.Lib
	for _, n := range []string{"routelock", "raw-1ms", "floor-publish"} {
		l, err := bench.LibByName(n)
		if err != nil {
			t.Fatal(err)
		}
		libs = append(libs, l)
	}
	r := &runner{dur: 2 * time.Second, handoffs: 100, procs: 4, res: map[string][]float64{}, perG: map[string][][]int64{}}
	for run := range 2 {
		for li, l := range libs {
			if !l.Floor {
				for _, g := range []int{1, 16, 64} {
					r.add(l.Name, "W1/"+strconv.Itoa(g), float64(1000*g+100*li+run))
					r.add(l.Name, "W1/"+strconv.Itoa(g)+"/cpu", float64(40+g+li+run))
					r.add(l.Name, "W1/"+strconv.Itoa(g)+"/commands", float64(4+4*li))
				}
			}
			for _, c := range w2Configs {
				if l.Floor && !c.floor() {
					continue
				}
				r.addW2(l.Name, c, fakeW2(c, li, run))
			}
			if !l.Floor {
				r.addW3(l.Name, "W3/local", fakeHandOvers(1+li+run))
				r.addW3(l.Name, "W3/remote", fakeHandOvers(2+li+run))
				r.addW3(l.Name, "W3/same", fakeHandOvers(3+li+run))
			}
		}
	}
	return r, libs
}

// fakeW2 is a made-up W2 outcome: goroutine i completed 10+i+li+run
// sections, except that library 1 starves goroutine 0.
func fakeW2(c w2Config, li, run int) bench.W2Result {
	res := bench.W2Result{Dur: 2 * time.Second, Cmds: 300}
	for i := range c.goroutines {
		n := int64(10 + i + li + run)
		if li == 1 && i == 0 {
			n = 0
		}
		res.PerG = append(res.PerG, n)
		res.Sections += n
		res.Waits = append(res.Waits, time.Duration(i+1)*time.Millisecond)
	}
	res.SectionSum = time.Duration(res.Sections) * c.section * 11 / 10
	return res
}

// fakeHandOvers is 100 hand-overs of scale×1 ms to scale×100 ms.
func fakeHandOvers(scale int) []time.Duration {
	var hs []time.Duration
	for i := 100; i >= 1; i-- {
		hs = append(hs, time.Duration(scale*i)*time.Millisecond)
	}
	return hs
}

// TestJSONRoundTrip writes what the runner recorded as lockbench -json does,
// reads it back as lockchart does, checks that every number arrives where
// the schema says, and draws it.
func TestJSONRoundTrip(t *testing.T) {
	r, libs := fakeRun(t)
	fs := flag.NewFlagSet("lockbench", flag.ContinueOnError)
	fs.Bool("child", false, "")
	fs.String("lib", "", "")
	fs.Int("runs", 2, "")
	fs.Duration("dur", 2*time.Second, "")
	if err := fs.Parse([]string{"-dur", "3s"}); err != nil {
		t.Fatal(err)
	}
	meta := newMeta(fs, 2, "a test")
	meta.RedisVersion = "7.0.15"
	want := r.jsonReport(meta, libs, "W1,W2,W3")

	path := filepath.Join(t.TempDir(), "lockbench.json")
	if err := results.WriteFile(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := results.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back differs:\n got %+v\nwant %+v", got, want)
	}

	m := got.Meta
	if m.Runs != 2 || m.Baseline != "raw-1ms" || m.Comment != "a test" || m.GoVersion == "" || m.NumCPU < 1 || m.GOMAXPROCS < 1 || m.Date.IsZero() {
		t.Errorf("meta: %+v", m)
	}
	if wantFlags := map[string]string{"runs": "2", "dur": "3s"}; !maps.Equal(m.Flags, wantFlags) {
		t.Errorf("flags %v, want %v (no internal flags)", m.Flags, wantFlags)
	}
	if !slices.Equal(m.Workloads, []string{"W1", "W2", "W3"}) {
		t.Errorf("workloads %v", m.Workloads)
	}
	if len(got.Libraries) != 3 || !got.Libraries[2].Floor || got.Libraries[0].Note == "" {
		t.Errorf("libraries %+v", got.Libraries)
	}

	// W1: three concurrencies for each lock, none for the floor; the median
	// of two runs is the larger; ratios are of medians.
	if len(got.W1) != 6 {
		t.Fatalf("%d W1 rows, want 6", len(got.W1))
	}
	w1 := got.W1[2] // routelock, 64 goroutines
	if w1.Library != "routelock" || w1.Goroutines != 64 || !slices.Equal(w1.CyclesPerSec.Runs, []float64{64000, 64001}) || w1.CyclesPerSec.Median != 64001 {
		t.Errorf("W1 row %+v", w1)
	}
	if w1.RatioToBaseline == nil || *w1.RatioToBaseline != 64001.0/64101 {
		t.Errorf("W1 ratio %v, want %v", w1.RatioToBaseline, 64001.0/64101)
	}
	if c := w1.ServerCPUMicros; c == nil || !slices.Equal(c.Runs, []float64{104, 105}) || c.Median != 105 {
		t.Errorf("W1 server CPU %+v", c)
	}
	if c := w1.ServerCommands; c == nil || c.Median != 4 || got.W1[5].ServerCommands == nil || got.W1[5].ServerCommands.Median != 8 {
		t.Errorf("W1 server commands %+v, raw's %+v", c, got.W1[5].ServerCommands)
	}

	// W2: every configuration for the locks, the floor only in one process
	// with sections.
	var rows, floorRows int
	for _, x := range got.W2 {
		rows++
		if x.Library == "floor-publish" {
			floorRows++
			if x.Processes != 1 || x.SectionMs == 0 {
				t.Errorf("floor row in %s", x.Config)
			}
		}
		if len(x.PerWaiterCompletions) != 2 || len(x.PerWaiterCompletions[0]) != x.Goroutines {
			t.Errorf("%s %s: per-waiter %d runs of %d, want 2 of %d", x.Library, x.Config, len(x.PerWaiterCompletions), len(x.PerWaiterCompletions[0]), x.Goroutines)
		}
		if (x.SectionMs == 0) != (x.OfIdeal == nil) {
			t.Errorf("%s %s: of_ideal %v with %v ms sections", x.Library, x.Config, x.OfIdeal, x.SectionMs)
		}
	}
	if rows != 2*len(w2Configs)+2 || floorRows != 2 {
		t.Errorf("%d W2 rows (%d of the floor)", rows, floorRows)
	}
	var w2 *results.W2Row
	for i, x := range got.W2 {
		if x.Library == "raw-1ms" && x.Config == "64x1ms-procs" {
			w2 = &got.W2[i]
		}
	}
	if w2 == nil {
		t.Fatal("no W2 row of raw-1ms in 64x1ms-procs")
	}
	if w2.Processes != 4 || w2.Goroutines != 64 || w2.SectionMs != 1 {
		t.Errorf("W2 configuration %+v", w2)
	}
	// raw-1ms starves goroutine 0: min 0, max 10+63+1+run.
	if !slices.Equal(w2.MinCompletions.Runs, []float64{0, 0}) || !slices.Equal(w2.MaxCompletions.Runs, []float64{74, 75}) ||
		!slices.Equal(w2.MinMaxShare.Runs, []float64{0, 0}) {
		t.Errorf("W2 min/max: %+v %+v %+v", w2.MinCompletions, w2.MaxCompletions, w2.MinMaxShare)
	}
	run0 := fakeW2(w2Configs[4], 1, 0)
	if w2.JainIndex.Runs[0] != run0.Jain() || !slices.Equal(w2.PerWaiterCompletions[0], run0.PerG) {
		t.Errorf("W2 Jain %v, want %v", w2.JainIndex.Runs[0], run0.Jain())
	}
	if w2.WaitP50Ms.Median != 33 || w2.WaitMaxMs.Median != 64 || w2.CmdsPerSection == nil || w2.Errors.Median != 0 {
		t.Errorf("W2 waits %+v %+v, cmds %v, errors %+v", w2.WaitP50Ms, w2.WaitMaxMs, w2.CmdsPerSection, w2.Errors)
	}

	// W3: the three waiters for each lock; p50/p90/p99/max of 1..100 ms × scale.
	if len(got.W3) != 6 {
		t.Fatalf("%d W3 rows, want 6", len(got.W3))
	}
	if s := got.W3[2]; s.Library != "routelock" || s.Waiter != results.SameInstance || s.P50Ms.Median != 204 {
		t.Errorf("W3 same-instance row %+v", s)
	}
	w3 := got.W3[1] // routelock, other process: scales 2 and 3
	if w3.Library != "routelock" || w3.Waiter != results.OtherProcess || w3.HandOvers != 100 {
		t.Errorf("W3 row %+v", w3)
	}
	for _, c := range []struct {
		name string
		s    results.Stat
		runs []float64
	}{
		{"p50", w3.P50Ms, []float64{102, 153}},
		{"p90", w3.P90Ms, []float64{182, 273}},
		{"p99", w3.P99Ms, []float64{200, 300}},
		{"max", w3.MaxMs, []float64{200, 300}},
	} {
		if !slices.Equal(c.s.Runs, c.runs) || c.s.Median != c.runs[1] {
			t.Errorf("W3 %s: %+v, want runs %v", c.name, c.s, c.runs)
		}
	}

	// What lockchart draws from it.
	var svg bytes.Buffer
	if err := results.Chart(&svg, got, results.ChartOptions{}); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg.Bytes()))
	for {
		if _, err := dec.Token(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("chart is not XML: %v", err)
		}
	}
	for _, s := range []string{">routelock<", ">raw-1ms<", ">floor-publish (not a lock)<", ">153 ms<", "Redis 7.0.15", "W2 64x1ms"} {
		if !bytes.Contains(svg.Bytes(), []byte(s)) {
			t.Errorf("chart lacks %q", s)
		}
	}
}

// TestTextReportIgnoresJSONMetrics checks that the metrics recorded only for
// -json leave the text tables as they were.
func TestTextReportIgnoresJSONMetrics(t *testing.T) {
	r, libs := fakeRun(t)
	var with bytes.Buffer
	r.report(&with, libs, "W1,W2,W3", 2)
	for k := range r.res {
		if m := k[strings.LastIndex(k, "/")+1:]; m == "minc" || m == "maxc" || m == "jain" || m == "p90" ||
			(strings.Contains(k, "|W3/") && m == "max") {
			delete(r.res, k)
		}
	}
	r.perG = nil
	var without bytes.Buffer
	r.report(&without, libs, "W1,W2,W3", 2)
	if with.String() != without.String() {
		t.Errorf("text report changed:\n%s\nwithout the JSON-only metrics:\n%s", with.String(), without.String())
	}
	if !strings.Contains(with.String(), "| routelock | 102.000 | 200.000 | 153.000 | 300.000 |") {
		t.Errorf("W3 table:\n%s", with.String())
	}
}

func TestParseRedisVersion(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n"
	if v := parseRedisVersion(info); v != "7.0.15" {
		t.Errorf("got %q", v)
	}
	if v := parseRedisVersion("# Server\r\n"); v != "" {
		t.Errorf("got %q from no version", v)
	}
}

func TestJSONFile(t *testing.T) {
	for _, c := range []struct {
		path, d string
		several bool
		want    string
	}{
		{"", "cluster", true, ""},
		{"/tmp/r.json", "cluster", false, "/tmp/r.json"},
		{"/tmp/r.json", "cluster", true, "/tmp/r.cluster.json"},
		{"/tmp/r", "sentinel", true, "/tmp/r.sentinel"},
	} {
		if got := jsonFile(c.path, c.d, c.several); got != c.want {
			t.Errorf("jsonFile(%q, %q, %v) = %q, want %q", c.path, c.d, c.several, got, c.want)
		}
	}
}

// TestFailedRunsGoOn: a library that fails is recorded, run by run, and
// the run goes on with the next library; the text report and the JSON
// list the failures. (A peer's errors used to abort the whole run.)
func TestFailedRunsGoOn(t *testing.T) {
	var tried []string
	failing := func(name string) bench.Lib {
		return bench.Lib{Name: name, New: func(bench.Target, *atomic.Int64) (bench.Mutexer, error) {
			tried = append(tried, name)
			return nil, errors.New(name + " cannot start")
		}}
	}
	libs := []bench.Lib{failing("a"), failing("b")}
	path := filepath.Join(t.TempDir(), "lockbench.json")
	if err := runOn(bench.ServerAt("127.0.0.1:1"), libs, "W1", 2, time.Millisecond, 1, 1, results.Meta{Runs: 2}, path); err != nil {
		t.Fatalf("runOn with failing libraries: %v, want the failures recorded", err)
	}
	if want := []string{"a", "b", "a", "b"}; !slices.Equal(tried, want) {
		t.Errorf("libraries tried %v, want %v: a failure must not stop the run", tried, want)
	}
	got, err := results.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Failures) != 4 || got.Failures[1].Library != "b" || got.Failures[2].Run != 2 || !strings.Contains(got.Failures[3].Error, "b cannot start") {
		t.Errorf("failures in the JSON: %+v", got.Failures)
	}
	var out strings.Builder
	r := &runner{res: map[string][]float64{}, perG: map[string][][]int64{}, failures: got.Failures}
	r.report(&out, libs, "W1", 2)
	if !strings.Contains(out.String(), "- run 2, b: b cannot start") {
		t.Errorf("the text report does not list the failures:\n%s", out.String())
	}
}

func TestParseServerCounters(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.0\r\n" +
		"\r\n# Commandstats\r\ncmdstat_evalsha:calls=10,usec=99,usec_per_call=9.9,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=7,usec=1\r\ncmdstat_get:calls=20,usec=5\r\n"
	c, err := parseServerCounters(info)
	if err != nil {
		t.Fatal(err)
	}
	if c.cpu != 3.75 || c.calls != 30 {
		t.Errorf("got %+v, want 3.75 s and 30 calls (INFO's own and the children's CPU left out)", c)
	}
	for _, bad := range []string{"used_cpu_sys:1\r\n", "used_cpu_sys:1\r\nused_cpu_user:x\r\n", "used_cpu_sys:1\r\nused_cpu_user:1\r\ncmdstat_get:usec=5\r\n"} {
		if _, err := parseServerCounters(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
