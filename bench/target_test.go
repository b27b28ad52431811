package bench

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/routelock/lock/internal/redisconf"
)

func TestTargetDeployment(t *testing.T) {
	for _, c := range []struct {
		t    Target
		want string
	}{
		{ServerAt("127.0.0.1:6379"), Single},
		{Target{redisconf.Cluster, "redis://127.0.0.1:7000?addr=127.0.0.1:7001"}, Cluster},
		{Target{redisconf.Sentinel, "redis://127.0.0.1:26379?master_name=m"}, Sentinel},
	} {
		if got := c.t.Deployment(); got != c.want {
			t.Errorf("%v: %q, want %q", c.t, got, c.want)
		}
	}
}

// Only a single server has databases other than 0: redsync over 3
// databases runs there alone.
func TestTargetDatabases(t *testing.T) {
	var n atomic.Int64
	cl := Target{redisconf.Cluster, "redis://127.0.0.1:7000"}
	if c, err := cl.Client(1, false, &n); err == nil || !strings.Contains(err.Error(), "database 1") {
		if c != nil {
			_ = c.Close()
		}
		t.Errorf("database 1 of a Cluster: %v", err)
	}
	c, err := ServerAt(addr).Client(2, false, &n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Set(t.Context(), "bench:db-test", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 1 {
		t.Errorf("%d commands counted, want 1", n.Load())
	}
	for _, l := range Libs() {
		if l.Name == "redsync3-1ms" && (l.RunsOn(Cluster) || !l.RunsOn(Single)) {
			t.Errorf("redsync3-1ms runs on a Cluster or not on one server")
		}
		if l.Name == "routelock-replicas1" && (l.RunsOn(Single) || !l.RunsOn(Sentinel)) {
			t.Errorf("routelock-replicas1 runs on one server (no replica) or not on Sentinel")
		}
	}
}
