package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/routelock/lock/bench/results"
)

var update = flag.Bool("update", false, "rewrite testdata/fixture.svg from testdata/fixture.json")

// The fixture's values are hand-written for these tests, not measured.
const fixture = "testdata/fixture.json"

// bar is one bar of a drawn chart.
type bar struct {
	panel, library, metric string
	value, width           float64
}

// parseSVG checks that svg is well-formed XML with an svg root that starts
// with a white background, and returns its bars and the text of its text
// elements.
func parseSVG(t *testing.T, svg []byte) (bars []bar, texts []string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	depth, root, first := 0, "", true
	var inText bool
	var cur strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			depth++
			attr := map[string]string{}
			for _, a := range e.Attr {
				attr[a.Name.Local] = a.Value
			}
			if depth == 1 {
				root = e.Name.Local
				if e.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root namespace %q", e.Name.Space)
				}
			}
			if depth == 2 && e.Name.Local == "rect" && first {
				if attr["fill"] != "#ffffff" || attr["x"] != "0" || attr["y"] != "0" {
					t.Errorf("first rect is not a white background: %v", attr)
				}
			}
			if depth == 2 && e.Name.Local != "title" {
				first = false
			}
			if e.Name.Local == "rect" && attr["class"] == "bar" {
				v, err1 := strconv.ParseFloat(attr["data-value"], 64)
				w, err2 := strconv.ParseFloat(attr["width"], 64)
				if err1 != nil || err2 != nil {
					t.Fatalf("bar %v: %v %v", attr, err1, err2)
				}
				bars = append(bars, bar{attr["data-panel"], attr["data-library"], attr["data-metric"], v, w})
			}
			if e.Name.Local == "text" {
				inText = true
				cur.Reset()
			}
		case xml.CharData:
			if inText {
				cur.Write(e)
			}
		case xml.EndElement:
			depth--
			if e.Name.Local == "text" {
				inText = false
				texts = append(texts, cur.String())
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q", root)
	}
	return bars, texts
}

// checkOrder checks that within each panel and metric, bar lengths are
// ordered as the values are: longer for larger, equal only for equal.
func checkOrder(t *testing.T, bars []bar) {
	t.Helper()
	groups := map[string][]bar{}
	for _, b := range bars {
		groups[b.panel+" "+b.metric] = append(groups[b.panel+" "+b.metric], b)
	}
	for g, bs := range groups {
		slices.SortFunc(bs, func(a, b bar) int { return strings.Compare(a.library, b.library) })
		for i, a := range bs {
			for _, b := range bs[i+1:] {
				if (a.value < b.value) != (a.width < b.width) || (a.value == b.value) != (a.width == b.width) {
					t.Errorf("%s: %s %v is %v long, %s %v is %v long", g, a.library, a.value, a.width, b.library, b.value, b.width)
				}
			}
		}
	}
}

func render(t *testing.T, in string, args ...string) (svg []byte, stderr string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "chart.svg")
	var errb bytes.Buffer
	if err := run(append([]string{"-in", in, "-o", out}, args...), &errb); err != nil {
		t.Fatalf("lockchart: %v\n%s", err, errb.String())
	}
	svg, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return svg, errb.String()
}

// TestFixtureChart draws the fixture and checks what a reader sees: each
// library, each median's label, units and directions, the run's metadata,
// and bars as long as their values say.
func TestFixtureChart(t *testing.T) {
	svg, stderr := render(t, fixture)
	if stderr != "" {
		t.Errorf("warnings: %s", stderr)
	}
	bars, texts := parseSVG(t, svg)
	has := func(s string) bool { return slices.Contains(texts, s) }

	// Latency: the four locks' other-process p50 and p99.
	w3 := map[string][2]string{
		"routelock":       {"0.201 ms", "0.420 ms"},
		"raw-1ms":         {"0.290 ms", "1.39 ms"},
		"rueidislock":     {"0.310 ms", "0.560 ms"},
		"redislock-100ms": {"98.7 ms", "99.3 ms"},
	}
	// Fairness in 64x1ms: min/max share and Jain's index.
	w2 := map[string][2]string{
		"routelock":                  {"0.96", "1.00"},
		"raw-1ms":                    {"0.26", "0.89"},
		"redislock-100ms":            {"0.00", "0.74"},
		"rueidislock":                {"0.00", "0.75"},
		"floor-publish (not a lock)": {"0.96", "1.00"},
	}
	for lib, labels := range w3 {
		if !has(lib) {
			t.Errorf("no label %q", lib)
		}
		for _, l := range labels {
			if !has(l) {
				t.Errorf("no W3 label %q of %s", l, lib)
			}
		}
	}
	for lib, labels := range w2 {
		if !has(lib) {
			t.Errorf("no label %q", lib)
		}
		for _, l := range labels {
			if !has(l) {
				t.Errorf("no W2 label %q of %s", l, lib)
			}
		}
	}
	for _, s := range []string{
		"Hand-over latency (W3), ms: lower is better",
		"Per-waiter fairness (W2 64x1ms): higher is better",
		"milliseconds, log scale",
		"test fixture: hand-written values, not measurements",
	} {
		if !has(s) {
			t.Errorf("no text %q", s)
		}
	}
	title := texts[1]
	for _, s := range []string{"2000-01-01", "Redis 7.0.15", "2 CPUs", "GOMAXPROCS 2", "medians of 2 runs"} {
		if !strings.Contains(title, s) {
			t.Errorf("metadata line %q lacks %q", title, s)
		}
	}
	// The 8x0 rows and the same-process rows are not drawn.
	for _, s := range []string{"0.168 ms", "0.175 ms", "0.439 ms"} {
		if has(s) {
			t.Errorf("same-process value %q drawn", s)
		}
	}

	rep, err := results.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{}
	for _, x := range rep.W3 {
		if x.Waiter == results.OtherProcess {
			want["w3 "+x.Library+" p50"] = x.P50Ms.Median
			want["w3 "+x.Library+" p99"] = x.P99Ms.Median
		}
	}
	for _, x := range rep.W2 {
		if x.Config == "64x1ms" {
			want["w2 "+x.Library+" min/max share (fewest ÷ most)"] = x.MinMaxShare.Median
			want["w2 "+x.Library+" Jain's index (1 = equal shares)"] = x.JainIndex.Median
		}
	}
	if len(bars) != len(want) || len(want) != 2*(4+5) {
		t.Errorf("%d bars, want %d", len(bars), len(want))
	}
	for _, b := range bars {
		if v, ok := want[b.panel+" "+b.library+" "+b.metric]; !ok || v != b.value {
			t.Errorf("bar %+v: want value %v (%v)", b, v, ok)
		}
		if b.width < 0 || b.width > 590 {
			t.Errorf("bar %+v outside the plot", b)
		}
	}
	checkOrder(t, bars)

	// Best first: routelock's latency bars come before raw-1ms's, and
	// redislock-100ms's last.
	var order []string
	for _, b := range bars {
		if b.panel == "w3" && b.metric == "p50" {
			order = append(order, b.library)
		}
	}
	if !slices.Equal(order, []string{"routelock", "raw-1ms", "rueidislock", "redislock-100ms"}) {
		t.Errorf("latency order %v", order)
	}
}

// TestFixtureGolden compares the drawing with testdata/fixture.svg byte for
// byte (go test -run Golden -update rewrites it), and drawing twice gives
// the same bytes.
func TestFixtureGolden(t *testing.T) {
	svg, _ := render(t, fixture)
	again, _ := render(t, fixture)
	if !bytes.Equal(svg, again) {
		t.Fatal("two drawings of one input differ")
	}
	golden := "testdata/fixture.svg"
	if *update {
		if err := os.WriteFile(golden, svg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(svg, want) {
		t.Errorf("drawing differs from %s; if the change is meant, run go test ./cmd/lockchart -run Golden -update and look at it", golden)
	}
}

// TestFixtureSchema checks that the fixture is exactly what results.Write
// writes for it (so it follows the schema's names and layout), carries no
// field the schema lacks, and that each median is that of its runs.
func TestFixtureSchema(t *testing.T) {
	b, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	var strict results.Report
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&strict); err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	rep, err := results.Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := results.Write(&again, rep); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), b) {
		t.Errorf("results.Write writes the fixture otherwise:\n%s", again.String())
	}
	check := func(what string, s results.Stat) {
		if n := results.NewStat(s.Runs); n == nil || n.Median != s.Median {
			t.Errorf("%s: median %v of runs %v", what, s.Median, s.Runs)
		}
	}
	for _, x := range rep.W1 {
		check("W1 "+x.Library, x.CyclesPerSec)
	}
	for _, x := range rep.W2 {
		w := "W2 " + x.Config + " " + x.Library
		for _, s := range []results.Stat{x.SectionsPerSec, x.WaitP50Ms, x.WaitP99Ms, x.WaitMaxMs, x.MinMaxShare, x.JainIndex, x.MinCompletions, x.MaxCompletions, x.Errors} {
			check(w, s)
		}
		for i, per := range x.PerWaiterCompletions {
			if len(per) != x.Goroutines || float64(slices.Min(per)) != x.MinCompletions.Runs[i] || float64(slices.Max(per)) != x.MaxCompletions.Runs[i] {
				t.Errorf("%s: run %d's per-waiter completions disagree with min/max", w, i)
			}
		}
	}
	for _, x := range rep.W3 {
		for _, s := range []results.Stat{x.P50Ms, x.P90Ms, x.P99Ms, x.MaxMs} {
			check("W3 "+x.Waiter+" "+x.Library, s)
		}
	}
}

// TestSameProcessLinear draws the same-process waiters, without the one
// library 100 ms slower: their latencies are within a factor of 20, so the
// axis is linear from 0.
func TestSameProcessLinear(t *testing.T) {
	rep, err := results.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	rep.W3 = slices.DeleteFunc(rep.W3, func(x results.W3Row) bool { return x.Library == "redislock-100ms" })
	in := filepath.Join(t.TempDir(), "in.json")
	if err := results.WriteFile(in, rep); err != nil {
		t.Fatal(err)
	}
	svg, _ := render(t, in, "-w3", results.SameProcess)
	bars, texts := parseSVG(t, svg)
	for _, s := range []string{"milliseconds", "0.175 ms", "1.50 ms", "0", "1.5"} {
		if !slices.Contains(texts, s) {
			t.Errorf("no text %q in %q", s, texts)
		}
	}
	if slices.Contains(texts, "milliseconds, log scale") {
		t.Error("log scale for values within a factor of 20")
	}
	var p99 []bar
	for _, b := range bars {
		if b.panel == "w3" && b.metric == "p99" {
			p99 = append(p99, b)
		}
	}
	// Linear from 0: lengths are proportional to values.
	for _, b := range p99 {
		if r := b.width / b.value / (p99[0].width / p99[0].value); r < 0.99 || r > 1.01 {
			t.Errorf("bar %+v not proportional to %+v", b, p99[0])
		}
	}
	checkOrder(t, bars)
}

// TestMissingPanel draws a report without W2: the latency panel alone, with
// a warning; and one with neither panel is an error.
func TestMissingPanel(t *testing.T) {
	rep, err := results.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	rep.W2 = nil
	in := filepath.Join(t.TempDir(), "in.json")
	if err := results.WriteFile(in, rep); err != nil {
		t.Fatal(err)
	}
	svg, stderr := render(t, in)
	if !strings.Contains(stderr, "fairness panel left out") {
		t.Errorf("stderr %q", stderr)
	}
	bars, _ := parseSVG(t, svg)
	for _, b := range bars {
		if b.panel != "w3" {
			t.Errorf("bar %+v without W2 rows", b)
		}
	}
	rep.W3 = nil
	if err := results.WriteFile(in, rep); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-in", in, "-o", filepath.Join(t.TempDir(), "x.svg")}, io.Discard); !errors.Is(err, results.ErrNothingToChart) {
		t.Errorf("no panels: %v", err)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-in", fixture, "extra"},
		{"-in", fixture, "-w3", "elsewhere"},
		{"-in", "testdata/no-such-file.json"},
	} {
		if err := run(args, io.Discard); err == nil {
			t.Errorf("lockchart %v: no error", args)
		}
	}
}
