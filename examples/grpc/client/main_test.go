package main

import (
	"testing"

	"github.com/routelock/lock/examples/internal/leftover"
)

// TestRun runs the example against its own server on embedded Redis: it
// fails unless exactly the stock is reserved.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	if err := run("", 30, 42, 7); err != nil {
		t.Fatal(err)
	}
}

// TestRunLeavesNoKeys: pointed at a Redis of the user's (REDIS_URL), the
// example deletes at exit every key it wrote, the stock and the locks'
// keys, and no key of the user's.
func TestRunLeavesNoKeys(t *testing.T) {
	leftover.Check(t, func(t *testing.T) {
		if err := run("", 10, 42, 3); err != nil {
			t.Fatal(err)
		}
	})
}
