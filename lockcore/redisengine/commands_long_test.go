//go:build long

package redisengine

import (
	"context"
	"maps"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
)

// TestCommandsPerCycleCluster: what the masters of a Cluster of its own (3
// masters with a replica each) run for one uncontended cycle, counted as
// TestCommandsPerCycle counts them, summed over the masters: the same
// commands as on one server.
func TestCommandsPerCycleCluster(t *testing.T) {
	set, err := redistest.StartClusterSet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Stop)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{set.Servers[0].Addr}})
	t.Cleanup(func() { _ = rdb.Close() })
	l := lockerOn(t, rdb, redistest.Prefix(t), Options{})
	ctx := context.Background()
	k := mustKey(t, "commands", "cluster")
	cycles(t, l, k, lifecycle.Policy{}, 1) // loads the scripts
	var (
		mu      sync.Mutex
		masters []*redis.Client
	)
	if err := rdb.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock() // ForEachMaster calls this for each master at once
		masters = append(masters, m)
		mu.Unlock()
		return m.ConfigResetStat(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	const n = 500
	cycles(t, l, k, lifecycle.Policy{}, n)
	calls := map[string]int64{}
	for _, m := range masters {
		for cmd, c := range commandCalls(t, m) {
			calls[cmd] += c
		}
	}
	got, shown := perCycle(calls, n)
	t.Logf("per cycle, the masters together: %s", shown)
	if !maps.Equal(got, uncontendedCycle) {
		t.Errorf("commands per cycle %v, want %v", got, uncontendedCycle)
	}
}
