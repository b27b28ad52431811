//go:build long

package quorumengine

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"
)

// caughtBy is, for each planted defect, the tests that must fail on it.
// The conformance suite has no check for the first two (its masters
// never split a vote in a way a check can see, and their counters move
// together), so each has a test of its own.
var caughtBy = map[string][]string{
	// An attempt without a quorum leaves its grants on the masters, to
	// block the key there until they expire.
	"noRelease": {"TestFailedQuorumReleasesEverywhere"},
	// The quorum's fence is raised on no master: the next hold, on a
	// quorum without the master that set it, gets a smaller one.
	"noFenceRaise": {"TestFencesRiseAcrossQuorums"},
	// One master's grant makes a hold: two holders at once, which the
	// suite's exclusion check and the exclusion run's checker see.
	"oneVote": {"TestConformance", "TestExclusionMasterKilled"},
}

// TestDefectsCaught (go test -tags long) runs, in a child process per
// planted defect (defectEnv set, which every engine of the tests then
// has), the tests that must catch it, and wants each of them to fail.
func TestDefectsCaught(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	failed := regexp.MustCompile(`(?m)^--- FAIL: (\w+) `)
	for defect, want := range caughtBy {
		t.Run(defect, func(t *testing.T) {
			run := "^(" + regexp.QuoteMeta(want[0])
			for _, w := range want[1:] {
				run += "|" + regexp.QuoteMeta(w)
			}
			run += ")$"
			cmd := exec.Command(exe, "-test.run", run, "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), defectEnv+"="+defect)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the tests passed on an engine with %s:\n%s", defect, out)
			}
			var got []string
			for _, m := range failed.FindAllSubmatch(out, -1) {
				got = append(got, string(m[1]))
			}
			for _, w := range want {
				if !slices.Contains(got, w) {
					t.Errorf("%s: %s passed; failed: %v\n%s", defect, w, got, out)
				}
			}
			t.Logf("%s fails %v", defect, got)
		})
	}
}
