package main

import (
	"bytes"
	"testing"

	"github.com/routelock/lock/examples/internal/leftover"
)

// TestRun runs the example on embedded Redis; run fails unless the call
// with the token re-enters and the one without is refused.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
}

// TestRunLeavesNoKeys: pointed at a Redis of the user's (REDIS_URL), the
// example deletes at exit every key its locks wrote (the fence key kept
// for an hour among them), and no key of the user's.
func TestRunLeavesNoKeys(t *testing.T) {
	leftover.Check(t, func(t *testing.T) {
		var out bytes.Buffer
		if err := run(&out); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
	})
}
