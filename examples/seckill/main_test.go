package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/routelock/lock/examples/internal/leftover"
	"github.com/routelock/lock/internal/redistest"
)

// TestRun runs both sales on embedded Redis. run itself fails unless the
// locked sale sold exactly the stock; the unlocked one must oversell, or
// the example shows nothing.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	for _, policy := range []string{"wait", "failfast"} {
		t.Run(policy, func(t *testing.T) {
			var out bytes.Buffer
			c := config{buyers: 60, items: 5, instances: 3, conns: 60, policy: policy, wait: 10 * time.Second, payment: 2 * time.Millisecond}
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
	for _, c := range []config{
		{buyers: 0, instances: 1, conns: 1, policy: "wait"},
		{buyers: 1, instances: 1, conns: 1, policy: "maybe"},
		{buyers: 1, instances: 1, conns: 0, policy: "failfast"},
		{buyers: 1, instances: 1, conns: 1, policy: "failfast", segments: -1},
		{buyers: 1, instances: 1, conns: 1, policy: "failfast", segments: 257},
	} {
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
		{config{buyers: 20, items: 5, instances: 2, conns: 20, policy: "failfast", wait: 0, payment: time.Millisecond}, true},
		{config{buyers: 20, items: 5, instances: 2, conns: 20, policy: "wait", wait: 0, payment: time.Millisecond}, false},
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

// TestSegments: the sale with the stock in 4 parts, each under its own
// lock, on embedded Redis: run fails unless exactly the stock is sold;
// then every instance knows the product sold out, and answers its buyers
// 410 without a command to Redis.
func TestSegments(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	t.Setenv("REDIS_CLUSTER_URL", "")
	var out bytes.Buffer
	c := config{buyers: 80, items: 12, instances: 3, segments: 4, conns: 80, policy: "wait", wait: 10 * time.Second, payment: time.Millisecond, answers: 50}
	if err := run(&out, c); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	if !strings.Contains(text, "lock.Segments(4)") {
		t.Fatalf("the table does not name the segments:\n%s", text)
	}
	known := regexp.MustCompile(`sold out known, after the last sale, on each instance: (.*)`).FindStringSubmatch(text)
	if known == nil || strings.Contains(known[1], "never") || len(strings.Split(known[1], " / ")) != 3 {
		t.Fatalf("not every instance knew the product sold out:\n%s", text)
	}
	cmds := regexp.MustCompile(`Redis commands for (\d+) requests through the lock: (\d+) sent by the instances`).FindStringSubmatch(text)
	if cmds == nil {
		t.Fatalf("no count of commands after the sale:\n%s", text)
	}
	if n, _ := strconv.Atoi(cmds[1]); n != 3*3*50 || cmds[2] != "0" {
		t.Fatalf("after the sale, %s requests sent %s commands; want 450 and 0:\n%s", cmds[1], cmds[2], text)
	}
}

// TestRunLeavesNoKeys: pointed at a Redis of the user's (REDIS_URL), the
// example deletes at exit every key it wrote, the locks' fence keys, queues
// and gates included, and no key of the user's.
func TestRunLeavesNoKeys(t *testing.T) {
	leftover.Check(t, func(t *testing.T) {
		var out bytes.Buffer
		c := config{buyers: 20, items: 5, instances: 2, conns: 20, policy: "wait", wait: 10 * time.Second, payment: time.Millisecond, answers: 5}
		if err := run(&out, c); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
	})
}

// TestQuorum: the sale with the locks on a quorum of 3 embedded masters
// (lockcore/quorumengine): run fails unless the locked sale sold exactly
// the stock; the table says 0 oversold with the lock.
func TestQuorum(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	t.Setenv("REDIS_CLUSTER_URL", "")
	t.Setenv("REDIS_QUORUM_URLS", "")
	var out bytes.Buffer
	c := config{buyers: 60, items: 5, instances: 3, conns: 60, policy: "wait", wait: 10 * time.Second, payment: 2 * time.Millisecond, quorum: 3}
	if err := run(&out, c); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	if !strings.Contains(text, "locks on a quorum of 3 embedded masters") {
		t.Fatalf("the sale does not say it locks on the quorum:\n%s", text)
	}
	m := regexp.MustCompile(`(?m)^oversold\s+(\d+)\s+(\d+)$`).FindStringSubmatch(text)
	if m == nil || m[2] != "0" {
		t.Fatalf("oversold with the lock on the quorum: %v\n%s", m, text)
	}
	if m[1] == "0" {
		t.Fatalf("the unlocked sale did not oversell:\n%s", text)
	}
}

// TestQuorumFromEnv: REDIS_QUORUM_URLS names the quorum's masters (three
// redis-servers of the test's own, or embedded ones on a machine without
// redis-server), and -quorum, when set, must agree with it.
func TestQuorumFromEnv(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	t.Setenv("REDIS_CLUSTER_URL", "")
	var urls []string
	for range 3 {
		addr := ""
		if srv := redistest.OwnReal(t); srv != nil {
			addr = srv.Addr
		} else {
			addr = miniredis.RunT(t).Addr()
		}
		urls = append(urls, "redis://"+addr)
	}
	t.Setenv("REDIS_QUORUM_URLS", strings.Join(urls, ","))
	if err := run(&bytes.Buffer{}, config{buyers: 1, items: 1, instances: 1, conns: 1, policy: "failfast", quorum: 5}); err == nil {
		t.Fatal("-quorum 5 with three masters in REDIS_QUORUM_URLS was accepted")
	}
	var out bytes.Buffer
	c := config{buyers: 40, items: 5, instances: 2, conns: 40, policy: "wait", wait: 10 * time.Second, payment: time.Millisecond}
	if err := run(&out, c); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "locks on a quorum of 3 masters at") {
		t.Fatalf("the sale does not name the masters of REDIS_QUORUM_URLS:\n%s", out.String())
	}
}
