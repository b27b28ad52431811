package main

import "testing"

// TestRun runs the example against its own server on embedded Redis: it
// fails unless exactly the stock is reserved.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	if err := run("", 30, 42, 7); err != nil {
		t.Fatal(err)
	}
}
