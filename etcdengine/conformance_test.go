package etcdengine

import (
	"testing"
	"time"

	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestConformance runs the conformance suite over engines on one embedded
// etcd server: every check of what the engine promises.
func TestConformance(t *testing.T) {
	cli := startEtcd(t)
	locktest.Run(t, func(t *testing.T, ev lockcore.Events) lockcore.Engine {
		e, err := New(cli, Options{Prefix: "conformance/", TTL: 2 * time.Second, Events: ev})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	})
}
