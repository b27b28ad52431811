package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/routelock/lock/bench"
)

var ctxBG = context.Background()

func (r *runner) report(w io.Writer, libs []bench.Lib, ws string, runs int) {
	fmt.Fprintf(w, "Medians of %d runs; ratios are to raw-1ms measured in the same run.\n\n", runs)
	cell := func(lib, metric, format string) string {
		v, ok := r.median(lib, metric)
		if !ok {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}
	ratio := func(lib, metric string) string {
		v, ok1 := r.median(lib, metric)
		b, ok2 := r.median("raw-1ms", metric)
		if !ok1 || !ok2 || b == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2f×)", v/b)
	}
	if strings.Contains(ws, "W1") {
		fmt.Fprintln(w, "W1: uncontended acquire+release cycles/s, distinct keys")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| library | 1 goroutine | 16 goroutines | 64 goroutines |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, l := range libs {
			if l.Floor {
				continue
			}
			fmt.Fprintf(w, "| %s |", l.Name)
			for _, g := range []string{"1", "16", "64"} {
				fmt.Fprintf(w, " %s%s |", cell(l.Name, "W1/"+g, "%.0f"), ratio(l.Name, "W1/"+g))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
		if _, ok := r.median("raw-1ms", "W1/1/cpu"); ok || r.meter != nil {
			fmt.Fprintln(w, "W1 on the Redis server, per cycle: CPU µs (user + system) and commands run, scripts' included")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| library | CPU µs, 1 goroutine | 16 | 64 | commands, 1 goroutine | 16 | 64 |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
			for _, l := range libs {
				if l.Floor {
					continue
				}
				fmt.Fprintf(w, "| %s |", l.Name)
				for _, m := range []string{"cpu", "commands"} {
					for _, g := range []string{"1", "16", "64"} {
						n := "W1/" + g + "/" + m
						fmt.Fprintf(w, " %s%s |", cell(l.Name, n, "%.1f"), ratio(l.Name, n))
					}
				}
				fmt.Fprintln(w)
			}
			fmt.Fprintln(w)
		}
	}
	if strings.Contains(ws, "W2") {
		for _, c := range w2Configs {
			n := "W2/" + c.name
			fmt.Fprintf(w, "W2 %s: %d goroutines on one key, %v sections", c.name, c.goroutines, c.section)
			if c.multi {
				fmt.Fprint(w, ", spread over worker processes")
			}
			fmt.Fprintln(w)
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| library | sections/s | × ideal | wait p50 ms | p99 ms | max ms | min/max per goroutine | cmds/section | errors |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
			for _, l := range libs {
				if l.Floor && !c.floor() {
					continue
				}
				mm := "–"
				if v, ok := r.median(l.Name, n+"/minmax"); ok {
					mm = fmt.Sprintf("%d/%d", int64(v)/1e6, int64(v)%1e6)
				}
				fmt.Fprintf(w, "| %s | %s%s | %s | %s | %s | %s | %s (%s) | %s | %s |\n", l.Name,
					cell(l.Name, n+"/rate", "%.0f"), ratio(l.Name, n+"/rate"),
					cell(l.Name, n+"/ideal", "%.2f"),
					cell(l.Name, n+"/p50", "%.1f"), cell(l.Name, n+"/p99", "%.1f"), cell(l.Name, n+"/max", "%.0f"),
					cell(l.Name, n+"/fair", "%.2f"), mm,
					cell(l.Name, n+"/cmds", "%.1f"), cell(l.Name, n+"/errors", "%.0f"))
			}
			fmt.Fprintln(w)
		}
	}
	if strings.Contains(ws, "W3") {
		fmt.Fprintln(w, "W3: hand-over latency, release to next waiter holding (ms)")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| library | same process p50 | p99 | other process p50 | p99 | same instance p50 | p99 |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
		for _, l := range libs {
			if l.Floor {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", l.Name,
				cell(l.Name, "W3/local/p50", "%.3f"), cell(l.Name, "W3/local/p99", "%.3f"),
				cell(l.Name, "W3/remote/p50", "%.3f"), cell(l.Name, "W3/remote/p99", "%.3f"),
				cell(l.Name, "W3/same/p50", "%.3f"), cell(l.Name, "W3/same/p99", "%.3f"))
		}
		fmt.Fprintln(w)
	}
	if len(r.failures) > 0 {
		fmt.Fprintln(w, "Failed runs (their medians are over the runs that did not fail):")
		fmt.Fprintln(w)
		for _, f := range r.failures {
			fmt.Fprintf(w, "- run %d, %s: %s\n", f.Run, f.Library, f.Error)
		}
		fmt.Fprintln(w)
	}
}
