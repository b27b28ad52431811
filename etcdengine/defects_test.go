//go:build long

package etcdengine

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// defectEnv names, in a child process of TestSuiteCatchesDefects, the
// defect planted in the engines the suite runs on.
const defectEnv = "ETCDENGINE_DEFECT"

// caughtBy is, for each planted defect, checks of the suite that must
// fail on it.
var caughtBy = map[string][]string{
	// The fence is the session's lease id, not the holder key's create
	// revision: holds on one session share it, so fences stop rising.
	"fenceFromLease": {"FencingOrder"},
	// A wait that gave up leaves its key queued: the lock is never
	// granted past it.
	"keepWaiter": {"Withdrawal"},
	// A waiter that wants the result is granted the lock in its turn
	// whether a result is stored or not, and does not watch for one.
	"grantOverResult": {"ResultsInLine"},
	// Keep stores the result even when the hold no longer holds its key,
	// whether or not the hold knew it lost it.
	"keepLost": {"ResultsLoss"},
	// A Keep sent again after its store landed does not know its own
	// result, and reports the hold lost.
	"keepForget": {"Results"},
}

// TestSuiteCatchesDefects (go test -tags long, which CI runs) runs the
// conformance suite, in a child process
// each, on engines with each planted defect, and wants the child to fail
// the checks that the defect breaks. In a child (defectEnv set), it is
// that run of the suite.
func TestSuiteCatchesDefects(t *testing.T) {
	if defect := os.Getenv(defectEnv); defect != "" {
		cli := startEtcd(t)
		locktest.Run(t, func(t *testing.T, ev lockcore.Events) lockcore.Engine {
			e, err := New(cli, Options{Prefix: "defect/", TTL: 2 * time.Second, Events: ev})
			if err != nil {
				t.Fatal(err)
			}
			e.defect = defect
			t.Cleanup(func() { _ = e.Close() })
			return e
		})
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	failed := regexp.MustCompile(`(?m)^\s*--- FAIL: TestSuiteCatchesDefects/(\w+) `)
	for defect, want := range caughtBy {
		t.Run(defect, func(t *testing.T) {
			cmd := exec.Command(exe, "-test.run", "^TestSuiteCatchesDefects$", "-test.v")
			cmd.Env = append(os.Environ(), defectEnv+"="+defect)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed on an engine with %s:\n%s", defect, out)
			}
			var got []string
			for _, m := range failed.FindAllSubmatch(out, -1) {
				got = append(got, string(m[1]))
			}
			for _, w := range want {
				if !slices.Contains(got, w) {
					t.Errorf("%s: check %s passed; failed: %v\n%s", defect, w, got, out)
				}
			}
			t.Logf("%s fails %v", defect, got)
		})
	}
}
