package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestRun runs both sales on embedded Redis. run itself fails unless the
// locked sale sold exactly the stock; the unlocked one must oversell, or
// the example shows nothing.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	for _, policy := range []string{"wait", "failfast"} {
		t.Run(policy, func(t *testing.T) {
			var out bytes.Buffer
			c := config{buyers: 60, items: 5, instances: 3, policy: policy, wait: 10 * time.Second, payment: 2 * time.Millisecond}
			if err := run(&out, c); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			var oversold string
			for _, line := range strings.Split(out.String(), "\n") {
				if f := strings.Fields(line); len(f) == 3 && f[0] == "oversold" {
					oversold = f[1]
				}
			}
			if oversold == "" || oversold == "0" {
				t.Fatalf("the unlocked sale did not oversell:\n%s", out.String())
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	for _, c := range []config{{buyers: 0, instances: 1, policy: "wait"}, {buyers: 1, instances: 1, policy: "maybe"}} {
		if err := run(&bytes.Buffer{}, c); err == nil {
			t.Errorf("run(%+v) accepted bad flags", c)
		}
	}
}

// TestWaitFlagOnlyForWaitPolicy: -wait is "how long a buyer waits for the
// lock with -policy wait"; a fail-fast sale runs whatever -wait says, and
// a waiting sale with a -wait that is not positive is a bad flag, refused
// with an error rather than a panic.
func TestWaitFlagOnlyForWaitPolicy(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	for _, c := range []struct {
		config
		ok bool
	}{
		{config{buyers: 20, items: 5, instances: 2, policy: "failfast", wait: 0, payment: time.Millisecond}, true},
		{config{buyers: 20, items: 5, instances: 2, policy: "wait", wait: 0, payment: time.Millisecond}, false},
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("run(-policy %s -wait %v) panicked: %v", c.policy, c.wait, r)
				}
			}()
			var out bytes.Buffer
			if err := run(&out, c.config); (err == nil) != c.ok {
				t.Errorf("run(-policy %s -wait %v) = %v, want ok %v\n%s", c.policy, c.wait, err, c.ok, out.String())
			}
		}()
	}
}
