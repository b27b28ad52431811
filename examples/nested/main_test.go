package main

import (
	"bytes"
	"testing"
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
