// Command testjson reads `go test -json` on stdin, prints each package's
// result and the output of failed tests, and exits non-zero if any test
// failed or was skipped: in CI every test must run, including those that
// need a real Redis.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	output := map[string][]string{} // by package + test
	var failed, skipped []string
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // not an event: build output
			continue
		}
		id := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			output[id] = append(output[id], e.Output)
		case "fail":
			if e.Test == "" {
				fmt.Printf("FAIL\t%s\t%.1fs\n", e.Package, e.Elapsed)
				if len(output[id]) > 0 && !hasFailedTest(failed, e.Package) {
					fmt.Print(strings.Join(output[id], ""))
				}
			} else {
				failed = append(failed, id)
				fmt.Print(strings.Join(output[id], ""))
			}
		case "pass":
			if e.Test == "" {
				fmt.Printf("ok\t%s\t%.1fs\n", e.Package, e.Elapsed)
			}
		case "skip":
			if e.Test != "" {
				skipped = append(skipped, id)
				fmt.Print(strings.Join(output[id], ""))
			}
		}
		if e.Action == "pass" || e.Action == "fail" || e.Action == "skip" {
			delete(output, id)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testjson:", err)
		os.Exit(2)
	}
	sort.Strings(skipped)
	for _, s := range skipped {
		fmt.Println("SKIPPED (not allowed in CI):", s)
	}
	if len(failed) > 0 || len(skipped) > 0 {
		fmt.Printf("%d failed, %d skipped\n", len(failed), len(skipped))
		os.Exit(1)
	}
}

func hasFailedTest(failed []string, pkg string) bool {
	for _, f := range failed {
		if strings.HasPrefix(f, pkg+" ") {
			return true
		}
	}
	return false
}
