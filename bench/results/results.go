// Package results is the JSON schema in which lockbench writes its results
// (lockbench -json FILE) and from which lockchart draws them.
//
// The schema is versioned by [Report.Schema]. Within one version, fields are
// only ever added, never renamed, retyped or given another meaning; readers
// ignore fields they do not know. Anything else is a new version, and [Read]
// refuses versions it does not know.
//
// Every measured number is a [Stat]: the value of each run and their median,
// as the text tables print it. Times are in milliseconds, rates per second.
// Rows are in the order lockbench ran them: workload configurations in their
// order, libraries in the order of -libs (or lockbench's own order).
package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// SchemaVersion is the version of the schema this package reads and writes.
const SchemaVersion = 1

// Waiter kinds of [W3Row].
const (
	// SameProcess is a waiter on a second lock instance in the holder's
	// process.
	SameProcess = "same-process"
	// OtherProcess is a waiter in another process.
	OtherProcess = "other-process"
	// SameInstance is a waiter on the holder's own lock instance (one
	// routelock Engine, one rueidislock Locker): what a request waiting
	// behind another request of the same service sees.
	SameInstance = "same-instance"
)

// Report is one lockbench invocation: its metadata and every result it
// reported.
type Report struct {
	// Schema is SchemaVersion of the writer.
	Schema int  `json:"schema"`
	Meta   Meta `json:"meta"`
	// Libraries are the libraries run, in run order.
	Libraries []Library `json:"libraries"`
	// W1 is uncontended acquire+release on distinct keys; absent when W1
	// did not run.
	W1 []W1Row `json:"w1,omitempty"`
	// W2 is goroutines contending for one key; absent when W2 did not run.
	W2 []W2Row `json:"w2,omitempty"`
	// W3 is hand-over latency; absent when W3 did not run.
	W3 []W3Row `json:"w3,omitempty"`
	// Failures are the runs of a library that failed, in run order: the
	// run goes on with the other libraries, and that library's medians
	// are over the runs that did not fail.
	Failures []Failure `json:"failures,omitempty"`
}

// Failure is one library's failed workload in one run.
type Failure struct {
	Library string `json:"library"`
	// Run is the run, from 1.
	Run int `json:"run"`
	// Error says which workload failed, and how.
	Error string `json:"error"`
}

// Meta describes the run: when, where and how it was made.
type Meta struct {
	// Date is when the run started, UTC, to the second.
	Date time.Time `json:"date"`
	// GoVersion is runtime.Version() of lockbench, e.g. "go1.26.0".
	GoVersion string `json:"go_version"`
	// GOOS and GOARCH are lockbench's runtime.GOOS and runtime.GOARCH.
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
	// NumCPU is runtime.NumCPU(): the logical CPUs lockbench could use,
	// shared with redis-server on the same machine.
	NumCPU int `json:"num_cpu"`
	// GOMAXPROCS is runtime.GOMAXPROCS(0) in lockbench.
	GOMAXPROCS int `json:"gomaxprocs"`
	// RedisVersion is redis_version from the server's INFO, e.g. "7.0.15";
	// empty if it could not be read.
	RedisVersion string `json:"redis_version"`
	// RedisStarted says whether lockbench started its own deployment
	// rather than using one given by -addr, -cluster-url or -sentinel-url.
	RedisStarted bool `json:"redis_started"`
	// Deployment is what the libraries ran on: "single" (one server),
	// "cluster" (3 masters with a replica each) or "sentinel" (a master
	// with 2 replicas under 3 sentinels). Absent in files written before
	// lockbench had -deploy: "single".
	Deployment string `json:"deployment,omitempty"`
	// Runs is the number of repetitions (-runs) each median is taken over.
	Runs int `json:"runs"`
	// Baseline is the library that ratios are to ("raw-1ms").
	Baseline string `json:"baseline"`
	// Workloads are the workloads run, of "W1", "W2", "W3".
	Workloads []string `json:"workloads"`
	// Flags are every command-line flag of lockbench by name, with its
	// value as given or its default, formatted as flag prints it.
	Flags map[string]string `json:"flags"`
	// Comment is free text given with -comment, e.g. the machine.
	Comment string `json:"comment,omitempty"`
}

// Library is one library configuration compared.
type Library struct {
	Name string `json:"name"`
	// Note is the configuration, in words.
	Note string `json:"note"`
	// Floor marks an entry that is not a lock (floor-publish): the least
	// work a hand-over through Redis can do, run in W2 in one process only.
	Floor bool `json:"floor,omitempty"`
}

// Stat is one measured quantity over the runs.
type Stat struct {
	// Median is the element at index len(Runs)/2 of Runs sorted (for an
	// even count, the upper of the two middle values), as the text tables
	// print it.
	Median float64 `json:"median"`
	// Runs are the values of the runs that produced one, in run order.
	Runs []float64 `json:"runs"`
}

// NewStat returns the Stat of the values of runs, or nil when there are
// none. It keeps its own copy of runs.
func NewStat(runs []float64) *Stat {
	if len(runs) == 0 {
		return nil
	}
	s := slices.Clone(runs)
	slices.Sort(s)
	return &Stat{Median: s[len(s)/2], Runs: slices.Clone(runs)}
}

// W1Row is one library at one concurrency of W1: goroutines that each
// acquire and release a key of their own, fail-fast.
type W1Row struct {
	Library    string `json:"library"`
	Goroutines int    `json:"goroutines"`
	// CyclesPerSec is acquire+release cycles per second, all goroutines.
	CyclesPerSec Stat `json:"cycles_per_sec"`
	// RatioToBaseline is CyclesPerSec.Median over the baseline's median in
	// the same run; absent when the baseline did not run.
	RatioToBaseline *float64 `json:"ratio_to_baseline,omitempty"`
	// ServerCPUMicros is the Redis server's CPU (user and system, from
	// INFO) per cycle, in µs; absent except on one server.
	ServerCPUMicros *Stat `json:"server_cpu_us,omitempty"`
	// ServerCommands is the commands the Redis server ran per cycle,
	// those inside scripts included (INFO commandstats); absent except on
	// one server.
	ServerCommands *Stat `json:"server_commands,omitempty"`
}

// W2Row is one library in one configuration of W2: goroutines taking one
// key (waiting), each holding it for a section and releasing it, for the
// measured window.
type W2Row struct {
	Library string `json:"library"`
	// Config names the configuration, e.g. "64x1ms" or "64x1ms-procs".
	Config     string `json:"config"`
	Goroutines int    `json:"goroutines"`
	// SectionMs is the time each holder spends inside; 0 is empty sections.
	SectionMs float64 `json:"section_ms"`
	// Processes is how many processes the goroutines are spread over.
	Processes int `json:"processes"`
	// SectionsPerSec is completed sections per second.
	SectionsPerSec Stat `json:"sections_per_sec"`
	// RatioToBaseline is SectionsPerSec.Median over the baseline's median;
	// absent when the baseline did not run this configuration.
	RatioToBaseline *float64 `json:"ratio_to_baseline,omitempty"`
	// OfIdeal is sections per second over one per measured mean section
	// length (what a perfect lock would complete); absent for empty
	// sections.
	OfIdeal *Stat `json:"of_ideal,omitempty"`
	// WaitP50Ms, WaitP99Ms and WaitMaxMs are quantiles of the time from
	// asking for the key to holding it, over every acquisition.
	WaitP50Ms Stat `json:"wait_p50_ms"`
	WaitP99Ms Stat `json:"wait_p99_ms"`
	WaitMaxMs Stat `json:"wait_max_ms"`
	// MinMaxShare is per-waiter fairness: the fewest sections any one
	// goroutine completed over the most any completed (1 is equal shares,
	// 0 is a goroutine starved); higher is better.
	MinMaxShare Stat `json:"min_max_share"`
	// JainIndex is Jain's fairness index of the completions per goroutine,
	// (Σx)² / (n·Σx²): 1 is equal shares, 1/n is one goroutine completing
	// all; higher is better.
	JainIndex Stat `json:"jain_index"`
	// MinCompletions and MaxCompletions are the fewest and the most
	// sections one goroutine completed. (The text table prints the pair
	// of one run, the run whose pair is the median ordered by fewest, then
	// most.)
	MinCompletions Stat `json:"min_completions"`
	MaxCompletions Stat `json:"max_completions"`
	// PerWaiterCompletions is, per run, the sections each goroutine
	// completed (over several processes: each process's goroutines in
	// turn).
	PerWaiterCompletions [][]int64 `json:"per_waiter_completions"`
	// CmdsPerSection is Redis commands sent per completed section; absent
	// when no section completed.
	CmdsPerSection *Stat `json:"cmds_per_section,omitempty"`
	// Errors is failed acquisitions other than at the end of the window.
	Errors Stat `json:"errors"`
}

// W3Row is one library's hand-over latency for one kind of waiter: from the
// holder calling unlock to the blocked waiter holding the lock.
type W3Row struct {
	Library string `json:"library"`
	// Waiter is SameProcess or OtherProcess.
	Waiter string `json:"waiter"`
	// HandOvers is how many hand-overs each run measured (-handoffs).
	HandOvers int `json:"hand_overs"`
	// P50Ms, P90Ms, P99Ms and MaxMs are quantiles of each run's hand-overs.
	P50Ms Stat `json:"p50_ms"`
	P90Ms Stat `json:"p90_ms"`
	P99Ms Stat `json:"p99_ms"`
	MaxMs Stat `json:"max_ms"`
}

// Write writes r as indented JSON, with SchemaVersion. A value that is not
// finite is an error (JSON cannot carry it).
func Write(w io.Writer, r *Report) error {
	c := *r
	c.Schema = SchemaVersion
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteFile writes r to the file at path, replacing it.
func WriteFile(path string, r *Report) error {
	var b bytes.Buffer
	if err := Write(&b, r); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// Read reads a Report and checks it: the schema version, and that no row
// names a library the report does not list.
func Read(rd io.Reader) (*Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("results: %w", err)
	}
	if r.Schema != SchemaVersion {
		return nil, fmt.Errorf("results: schema version %d, want %d", r.Schema, SchemaVersion)
	}
	known := map[string]bool{}
	for _, l := range r.Libraries {
		known[l.Name] = true
	}
	check := func(w, lib string) error {
		if !known[lib] {
			return fmt.Errorf("results: %s row of library %q, which the report does not list", w, lib)
		}
		return nil
	}
	for _, x := range r.W1 {
		if err := check("W1", x.Library); err != nil {
			return nil, err
		}
	}
	for _, x := range r.W2 {
		if err := check("W2", x.Library); err != nil {
			return nil, err
		}
	}
	for _, x := range r.W3 {
		if err := check("W3", x.Library); err != nil {
			return nil, err
		}
		if x.Waiter != SameProcess && x.Waiter != OtherProcess && x.Waiter != SameInstance {
			return nil, fmt.Errorf("results: W3 row of %q: unknown waiter %q", x.Library, x.Waiter)
		}
	}
	return &r, nil
}

// ReadFile reads the Report in the file at path.
func ReadFile(path string) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f)
}

// Library returns the library named name, and whether the report lists it.
func (r *Report) Library(name string) (Library, bool) {
	for _, l := range r.Libraries {
		if l.Name == name {
			return l, true
		}
	}
	return Library{}, false
}
