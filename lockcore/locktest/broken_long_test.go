//go:build long

package locktest

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/routelock/lock/lockcore"
)

// defectEnv names, in a child process of TestSuiteCatches, the defect of
// the engine the suite runs on.
const defectEnv = "LOCKTEST_DEFECT"

// caughtBy is, for each defect, the checks of Run that an engine with it
// fails: exactly those, and no others.
var caughtBy = map[string][]string{
	// A held key is granted to anyone who asks: sections overlap, waiters
	// never queue (not even for Close to fail them), fail-fast and made-up tokens get in, and a key still
	// held by a re-entry or a token entry is given away.
	// A key run twice, by the holder granted beside its runner.
	"grantTwice": {"Close", "Events", "Exclusion", "FIFO", "InMemoryReentry", "MaxHold", "Operator", "Policy", "ResultsInLine", "ResultsOnce", "SeveralKeys", "Shared", "TokenGrantsNothing", "TokenReentry", "Withdrawal"},
	// Waiters served newest first: a late reader passes a queued writer.
	"lifo": {"FIFO", "Shared", "WriterBound"},
	// A propagated token waits like a stranger: no token re-entry, and no
	// holder counted twice.
	// A reader's propagated token asking for the exclusive lock waits.
	"ignoreTokens": {"Operator", "ResultsInLine", "TokenReentry", "Upgrade"},
	// A free key taken under the caller's propagated token: a made-up
	// token gets in, and a set's second key looks re-entered, not taken.
	"tokenTakesFree": {"SeveralKeys", "TokenGrantsNothing"},
	// A loss never told: not to Close's leases either.
	"silentLoss": {"Close", "LossThroughContext"},
	// Every hold has fence 1: fences stop rising wherever they are watched.
	"fenceReset": {"Exclusion", "FencingOrder", "MaxHold", "Operator", "Permits", "Shared", "TokenGrantsNothing"},
	"keepWaiter": {"Withdrawal"},
	// Every check that counts Ended.
	"revokeNoBump": {"FencingOrder", "Operator"},
	// Every check that waits for a held key, Close's included.
	"waitIgnored": {"Close", "Events", "Exclusion", "FIFO", "MaxHold", "Operator", "Permits", "Policy", "ResultsInLine", "ResultsOnce", "SeveralKeys", "Shared", "TokenGrantsNothing", "Withdrawal", "WriterBound"},
	"slotReused":  {"Permits"},
	"writerJoins": {"Permits", "Shared"},
	"readersPass": {"Shared"},
	"gateIgnored": {"Gates"},
	// Every check that reads back a result with a line feed.
	"keepTrim":  {"Results", "ResultsInLine", "ResultsOnce", "ResultsStored"},
	"keepAgain": {"Results"},
	"keepLost":  {"ResultsLoss"},
	// Visible only to a holder that takes the key between the release and
	// the store.
	"keepApart": {"ResultsInLine", "ResultsOnce"},
	"dropKept":  {"ResultsStored"},
	// A waiter that wants the result is granted the key instead.
	"keepGrants": {"ResultsInLine"},
}

// mayCatch names, for a defect, checks that catch it only when the
// goroutines meet a certain way, and may pass. WriterBound fails when more
// than 16 readers enter while a writer waits: grantTwice lets a reader past
// a queued writer only at a moment when exactly one reader holds, which 8
// readers with 5 ms sections meet in most runs but not all (one run in a
// busy CI let 15 pass); readersPass lets every reader past, but the writer
// gets in whenever the readers happen to be out at once, which under the
// race detector came after 41 ms and 5 readers. Shared catches readersPass
// every time.
var mayCatch = map[string][]string{
	"grantTwice":  {"WriterBound"},
	"readersPass": {"WriterBound"},
}

// TestSuiteCatches runs Run, in a child process each, on an engine with
// each defect, and wants the child to fail exactly the checks that the
// defect breaks: the suite is precise, not only loud. In a child (defectEnv
// set), it is that run of the suite.
func TestSuiteCatches(t *testing.T) {
	if defect := os.Getenv(defectEnv); defect != "" {
		Run(t, brokenEngines(defect))
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	all := checkNames()
	result := regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL): TestSuiteCatches/(\w+) `)
	var wg sync.WaitGroup
	for _, defect := range Defects {
		want, ok := caughtBy[defect]
		if !ok {
			t.Errorf("defect %s: no checks named to catch it", defect)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			cmd := exec.Command(exe, "-test.run", "^TestSuiteCatches$", "-test.v", "-test.count=1", "-test.timeout=2m",
				"-test.parallel=16") // the checks wait, mostly: all at once
			cmd.Env = append(os.Environ(), defectEnv+"="+defect)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Errorf("defect %s: the suite passed", defect)
				return
			}
			var failed, passed []string
			for _, m := range result.FindAllStringSubmatch(string(out), -1) {
				if m[1] == "FAIL" {
					failed = append(failed, m[2])
				} else {
					passed = append(passed, m[2])
				}
			}
			maybe := func(c string) bool { return slices.Contains(mayCatch[defect], c) }
			failed = slices.DeleteFunc(failed, maybe)
			passed = slices.DeleteFunc(passed, maybe)
			slices.Sort(failed)
			slices.Sort(passed)
			wantPassed := slices.DeleteFunc(slices.Clone(all), func(c string) bool { return slices.Contains(want, c) || maybe(c) })
			if !slices.Equal(failed, want) || !slices.Equal(passed, wantPassed) {
				t.Errorf("defect %s: failed %v, passed %v; want failed %v, passed the rest\n%s", defect, failed, passed, want, out)
				return
			}
			t.Logf("defect %s: caught by %v in %v", defect, failed, time.Since(start).Round(time.Millisecond))
		}()
	}
	wg.Wait()
}

// checkNames returns the names of the checks that Run runs on the
// in-memory engine, which promises everything: all of them, sorted.
func checkNames() []string {
	var names []string
	for _, c := range checks {
		names = append(names, c.name)
	}
	slices.Sort(names)
	return names
}

// brokenEngines is the newEngine of Run for an engine with defect: one per
// check, as for the correct engine.
func brokenEngines(defect string) func(t *testing.T, ev lockcore.Events) lockcore.Engine {
	var mu sync.Mutex
	engines := make(map[*testing.T]*Engine)
	return func(t *testing.T, ev lockcore.Events) lockcore.Engine {
		mu.Lock()
		defer mu.Unlock()
		e := engines[t]
		if e == nil {
			e = Broken(defect, ev)
			engines[t] = e
		}
		return e
	}
}
