package results

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestNewStat(t *testing.T) {
	if NewStat(nil) != nil {
		t.Error("a Stat of no runs")
	}
	runs := []float64{3, 1, 2}
	s := NewStat(runs)
	if s.Median != 2 || !slices.Equal(s.Runs, []float64{3, 1, 2}) {
		t.Errorf("odd: %+v", s)
	}
	runs[0] = 9
	if s.Runs[0] != 3 {
		t.Error("Stat shares its caller's slice")
	}
	// Even counts take the upper middle value, as lockbench's text does.
	if s := NewStat([]float64{4, 1, 3, 2}); s.Median != 3 {
		t.Errorf("even: %+v", s)
	}
}

func minimal() *Report {
	return &Report{
		Libraries: []Library{{Name: "a"}},
		W3: []W3Row{{Library: "a", Waiter: OtherProcess, HandOvers: 1,
			P50Ms: Stat{1, []float64{1}}, P90Ms: Stat{1, []float64{1}}, P99Ms: Stat{1, []float64{1}}, MaxMs: Stat{1, []float64{1}}}},
	}
}

func TestWriteRead(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, minimal()); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "{\n  \"schema\": 1,") || !strings.HasSuffix(b.String(), "}\n") {
		t.Errorf("layout:\n%s", b.String())
	}
	r, err := Read(&b)
	if err != nil || r.Schema != SchemaVersion || r.W3[0].P50Ms.Median != 1 {
		t.Fatalf("%+v %v", r, err)
	}

	bad := minimal()
	bad.W3[0].P99Ms.Median = math.NaN()
	if err := Write(&b, bad); err == nil {
		t.Error("NaN written")
	}
}

func TestReadRejects(t *testing.T) {
	for name, mutate := range map[string]func(*Report){
		"unknown library": func(r *Report) { r.W3[0].Library = "b" },
		"unknown waiter":  func(r *Report) { r.W3[0].Waiter = "elsewhere" },
		"W1 library":      func(r *Report) { r.W1 = []W1Row{{Library: "b"}} },
		"W2 library":      func(r *Report) { r.W2 = []W2Row{{Library: "b"}} },
	} {
		r := minimal()
		mutate(r)
		var b bytes.Buffer
		if err := Write(&b, r); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(&b); err == nil {
			t.Errorf("%s: read", name)
		}
	}
	var b bytes.Buffer
	if err := Write(&b, minimal()); err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(b.String(), `"schema": 1`, `"schema": 2`, 1)
	if _, err := Read(strings.NewReader(other)); err == nil || !strings.Contains(err.Error(), "schema version 2") {
		t.Errorf("schema 2: %v", err)
	}
	// A field a later writer added within version 1 is ignored.
	later := strings.Replace(b.String(), `"schema": 1,`, `"schema": 1, "later": true,`, 1)
	if _, err := Read(strings.NewReader(later)); err != nil {
		t.Errorf("unknown field: %v", err)
	}
}
