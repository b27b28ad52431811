package results

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestLatencyScale(t *testing.T) {
	for _, c := range []struct {
		vs    []float64
		log   bool
		ticks []float64
	}{
		{[]float64{0.17, 0.44, 1.47}, false, []float64{0, 0.5, 1, 1.5}},
		{[]float64{0.2, 0.3}, false, []float64{0, 0.1, 0.2, 0.3}},
		{[]float64{12, 95}, false, []float64{0, 20, 40, 60, 80, 100}},
		{[]float64{0.17, 0.44, 247}, true, []float64{0.1, 1, 10, 100, 1000}},
		{[]float64{0.3, 5}, false, []float64{0, 1, 2, 3, 4, 5}},
		{[]float64{0.1, 10}, true, []float64{0.01, 0.1, 1, 10}},
		{[]float64{0.15, 0.4, 1000}, true, []float64{0.1, 1, 10, 100, 1000}},
	} {
		s := latencyScale(c.vs)
		if s.log != c.log || !slices.Equal(s.ticks, c.ticks) {
			t.Errorf("%v: log %v ticks %v, want %v %v", c.vs, s.log, s.ticks, c.log, c.ticks)
		}
		last := -1.0
		for _, v := range c.vs {
			l := s.length(v, 100)
			if l <= last || l > 100 {
				t.Errorf("%v: %v is %v long after %v", c.vs, v, l, last)
			}
			last = l
		}
	}
}

func TestMsText(t *testing.T) {
	for v, want := range map[float64]string{0.1684: "0.168 ms", 1.394: "1.39 ms", 98.606: "98.6 ms", 246.9: "247 ms"} {
		if got := msText(v); got != want {
			t.Errorf("%v: %q, want %q", v, got, want)
		}
	}
}

func TestChartNothing(t *testing.T) {
	r := minimal()
	if err := Chart(&bytes.Buffer{}, r, ChartOptions{Waiter: SameProcess}); !errors.Is(err, ErrNothingToChart) {
		t.Errorf("same-process rows drawn from other-process ones: %v", err)
	}
	var b bytes.Buffer
	if err := Chart(&b, r, ChartOptions{}); err != nil || !strings.Contains(b.String(), `data-library="a"`) {
		t.Errorf("%v\n%s", err, b.String())
	}
}
