// Command lockchart draws the results lockbench wrote with -json as one
// self-contained SVG: hand-over latency (W3 p50 and p99 per library, lower
// is better) and per-waiter fairness (W2 min/max share and Jain's index per
// library, higher is better), as horizontal bars of the medians, with the
// run's date, Redis version and CPUs in the title. It uses no fonts, scripts
// or styles from elsewhere and draws on a white background, so it reads the
// same on light and dark pages. The same input always gives the same bytes.
//
//	go run ./cmd/lockbench -runs 2 -dur 2s -handoffs 200 -json /tmp/lockbench.json
//	go run ./cmd/lockchart -in /tmp/lockbench.json -o ../docs/bench.svg
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/routelock/lock/bench/results"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "lockchart:", err)
		}
		os.Exit(2)
	}
}

// run is lockchart with its command-line arguments; warnings go to stderr.
func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("lockchart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "lockbench -json output to read (required)")
	out := fs.String("o", "bench.svg", "SVG file to write; - for standard output")
	waiter := fs.String("w3", results.OtherProcess, "W3 waiter to draw: "+results.OtherProcess+", "+results.SameProcess+" or "+results.SameInstance)
	w2 := fs.String("w2", results.DefaultW2Config, "W2 configuration to draw")
	highlight := fs.String("highlight", "routelock", "library-name prefix drawn in colour")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("-in FILE is required, and no other arguments")
	}
	if *waiter != results.OtherProcess && *waiter != results.SameProcess && *waiter != results.SameInstance {
		return fmt.Errorf("-w3 %q: want %s, %s or %s", *waiter, results.OtherProcess, results.SameProcess, results.SameInstance)
	}
	rep, err := results.ReadFile(*in)
	if err != nil {
		return err
	}
	var waiters, configs []string
	for _, x := range rep.W3 {
		if !slices.Contains(waiters, x.Waiter) {
			waiters = append(waiters, x.Waiter)
		}
	}
	for _, x := range rep.W2 {
		if !slices.Contains(configs, x.Config) {
			configs = append(configs, x.Config)
		}
	}
	if !slices.Contains(waiters, *waiter) {
		fmt.Fprintf(stderr, "lockchart: no W3 rows with waiter %s (the file has %v): latency panel left out\n", *waiter, waiters)
	}
	if !slices.Contains(configs, *w2) {
		fmt.Fprintf(stderr, "lockchart: no W2 rows of configuration %s (the file has %v): fairness panel left out\n", *w2, configs)
	}
	var svg bytes.Buffer
	if err := results.Chart(&svg, rep, results.ChartOptions{Waiter: *waiter, W2Config: *w2, Highlight: *highlight}); err != nil {
		return err
	}
	if *out == "-" {
		_, err = os.Stdout.Write(svg.Bytes())
		return err
	}
	return os.WriteFile(*out, svg.Bytes(), 0o644)
}
