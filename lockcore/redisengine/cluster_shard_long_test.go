//go:build long

package redisengine

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestClusterHandOversOnOneShard: on a 3-master Cluster with a replica
// each, 20 hand-overs of one lock between two Engines, each to a waiter of
// the other, cost messages on the lock's shard only: one SPUBLISH on its
// master each, no PUBLISH anywhere, and no pub/sub message on the cluster
// bus of another shard's nodes (CLUSTER INFO's message counters); only the
// lock's master has the waiting Engine's shard channel subscribed
// (PUBSUB SHARDNUMSUB), and every waiter is woken by its message. It stays
// so after the shard's replica takes over (CLUSTER FAILOVER) and after the
// slot moved to another master (redis-cli --cluster reshard): the
// subscription follows the slot within a few hand-overs.
func TestClusterHandOversOnOneShard(t *testing.T) {
	if redistest.OwnReal(t) == nil { // redis-server is not on PATH
		return
	}
	set := ownSet(t, redistest.StartClusterSet)
	admin := set.Conf().Open(nil).(*redis.ClusterClient)
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()

	recs := [2]*recorder{newRecorder(), newRecorder()}
	var engines [2]*Engine
	prefix := redistest.Prefix(t)
	for i := range engines {
		rdb := set.Conf().Open(nil)
		t.Cleanup(func() { _ = rdb.Close() })
		e, err := New(rdb, Options{Prefix: prefix, Events: recs[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines[i] = e
	}
	// A product in slot 0, the lowest slot of its master: redis-cli moves
	// a master's lowest slots first.
	var k lockcore.Key
	for i := 0; ; i++ {
		k = mustKey(t, "shard", fmt.Sprint("p", i))
		if slotOf(engines[0].redisKeys(k)[0]) == 0 {
			break
		}
	}
	qkey := engines[0].redisKeys(k)[1]
	waiterChannel := *engines[1].nf.sh.channel(0)

	// round passes the lock n times between the Engines and returns how
	// many of the waiters were woken by a message.
	round := func(n int) (byMessage int) {
		t.Helper()
		holder := 0
		ls, err := engines[0].Acquire(ctx, k, lifecycle.Policy{Wait: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			next := 1 - holder
			before := recs[next].wokenBy(wokenByMessage)
			type result struct {
				ls  *lifecycle.Lease
				err error
			}
			got := make(chan result, 1)
			go func() {
				ls, err := engines[next].Acquire(ctx, k, lifecycle.Policy{Wait: 5 * time.Second})
				got <- result{ls, err}
			}()
			waitFor(t, 5*time.Second, "the waiter queued", func() bool {
				select {
				case r := <-got:
					t.Fatalf("the waiter did not wait: %v", r.err)
				default:
				}
				return admin.ZCard(ctx, qkey).Val() == 1
			})
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-got // bounded by the wait of 5 s
			if r.err != nil {
				t.Fatal(r.err)
			}
			if recs[next].wokenBy(wokenByMessage) > before {
				byMessage++
			}
			ls, holder = r.ls, next
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return byMessage
	}
	// follow waits until both Engines' shard channels of slot 0 are
	// subscribed to on the slot's master and nowhere else, then checks 20
	// hand-overs.
	channels := []string{*engines[0].nf.sh.channel(0), waiterChannel}
	follow := func(after, home string) {
		t.Helper()
		start := time.Now()
		waitFor(t, 30*time.Second, "the shard channels subscribed on the slot's master only, after "+after, func() bool {
			return subscribedOnOnly(set, home, channels)
		})
		t.Logf("after %s: the subscriptions were on the slot's master only %v later", after, time.Since(start).Round(time.Millisecond))
		before := pubsubCounts(t, set)
		if got := round(20); got != 20 {
			t.Errorf("after %s: %d of 20 hand-overs woken by a message", after, got)
		}
		checkOneShard(t, admin, set, before, pubsubCounts(t, set), home, waiterChannel, 20)
	}

	if got := round(1); got != 1 {
		t.Errorf("the first hand-over: woken by a message %d times", got)
	}
	master, err := admin.MasterForKey(ctx, qkey)
	if err != nil {
		t.Fatal(err)
	}
	follow("the first subscription", master.Options().Addr)

	replica := replicaOf(t, admin, master.Options().Addr)
	promote(t, replica)
	follow("CLUSTER FAILOVER", replica)

	from, to, toAddr := nodeID(t, replica), "", ""
	waitFor(t, 20*time.Second, "another master", func() bool {
		shards, err := admin.ClusterShards(ctx).Result()
		if err != nil {
			return false
		}
		for _, sh := range shards {
			for _, n := range sh.Nodes {
				if n.Role == "master" && n.ID != from && len(sh.Slots) > 0 {
					to, toAddr = n.ID, fmt.Sprintf("%s:%d", n.IP, n.Port)
				}
			}
		}
		return to != ""
	})
	waitFor(t, 20*time.Second, "the nodes agreeing", func() bool {
		return exec.Command("redis-cli", "--cluster", "check", replica).Run() == nil
	})
	out, err := exec.Command("redis-cli", "--cluster", "reshard", replica,
		"--cluster-from", from, "--cluster-to", to, "--cluster-slots", "1", "--cluster-yes").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Moving slot 0 from") {
		t.Fatalf("redis-cli --cluster reshard did not move slot 0: %v: %s", err, out)
	}
	follow("slot 0 moved to another master", toAddr)
}

// pubsubCounts returns, by node address, the node's PUBLISH and SPUBLISH
// calls and the pub/sub messages its cluster bus received.
func pubsubCounts(t *testing.T, set *redistest.Set) map[string]map[string]int64 {
	t.Helper()
	ctx := context.Background()
	out := map[string]map[string]int64{}
	for _, s := range set.Servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr})
		stats, err1 := rc.Info(ctx, "commandstats").Result()
		bus, err2 := rc.ClusterInfo(ctx).Result()
		_ = rc.Close()
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v %v", s.Addr, err1, err2)
		}
		out[s.Addr] = map[string]int64{
			"publish":           statField(stats, "cmdstat_publish:calls="),
			"spublish":          statField(stats, "cmdstat_spublish:calls="),
			"bus publish":       statField(bus, "cluster_stats_messages_publish_received:"),
			"bus shard publish": statField(bus, "cluster_stats_messages_publishshard_received:"),
		}
	}
	return out
}

// statField returns the number after prefix in an INFO text, 0 when absent.
func statField(text, prefix string) int64 {
	i := strings.Index(text, prefix)
	if i < 0 {
		return 0
	}
	v := text[i+len(prefix):]
	if j := strings.IndexAny(v, ",\r\n"); j >= 0 {
		v = v[:j]
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// checkOneShard checks that between before and after, n hand-overs of a
// lock whose master is at home cost n SPUBLISH calls there and no pub/sub
// traffic on another shard, and that the waiting Engine's shard channel is
// subscribed on that master only.
func checkOneShard(t *testing.T, admin *redis.ClusterClient, set *redistest.Set, before, after map[string]map[string]int64, home, channel string, n int) {
	t.Helper()
	ctx := context.Background()
	shard := map[string]bool{home: true, replicaOf(t, admin, home): true}
	for addr, a := range after {
		d := map[string]int64{}
		for what, v := range a {
			d[what] = v - before[addr][what]
		}
		t.Logf("%s (%s): %v", addr, map[bool]string{true: "the lock's shard", false: "another shard"}[shard[addr]], d)
		if d["publish"] != 0 {
			t.Errorf("%s: %d PUBLISH calls for hand-overs", addr, d["publish"])
		}
		switch {
		case addr == home && d["spublish"] != int64(n):
			t.Errorf("the lock's master %s: %d SPUBLISH calls for %d hand-overs", addr, d["spublish"], n)
		case addr != home && d["spublish"] != 0:
			t.Errorf("%s, not the lock's master: %d SPUBLISH calls", addr, d["spublish"])
		}
		if !shard[addr] && (d["bus publish"] != 0 || d["bus shard publish"] != 0) {
			t.Errorf("%s, of another shard: %d pub/sub messages on its cluster bus", addr, d["bus publish"]+d["bus shard publish"])
		}
		rc := redis.NewClient(&redis.Options{Addr: addr})
		subs, err := rc.PubSubShardNumSub(ctx, channel).Result()
		role, _ := rc.Info(ctx, "replication").Result()
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(role, "role:master") {
			continue
		}
		if want := map[bool]int64{true: 1, false: 0}[addr == home]; subs[channel] != want {
			t.Errorf("master %s: %d subscribers of the waiting Engine's shard channel, want %d", addr, subs[channel], want)
		}
	}
}

// subscribedOnOnly reports whether each of channels has one subscriber on
// the node at addr and none on any other node.
func subscribedOnOnly(set *redistest.Set, addr string, channels []string) bool {
	ctx := context.Background()
	for _, s := range set.Servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		subs, err := rc.PubSubShardNumSub(ctx, channels...).Result()
		_ = rc.Close()
		if err != nil {
			return false
		}
		want := int64(0)
		if s.Addr == addr {
			want = 1
		}
		for _, ch := range channels {
			if subs[ch] != want {
				return false
			}
		}
	}
	return true
}

// promote has the replica at addr take over from its master with CLUSTER
// FAILOVER, sent again when a try did not complete (a manual failover
// is abandoned after 5 s, as when the replica is still syncing).
func promote(t *testing.T, addr string) {
	t.Helper()
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rc.Close()
	isMaster := func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	}
	for try := 0; try < 6; try++ {
		if err := rc.ClusterFailover(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(7 * time.Second); time.Now().Before(end); {
			if isMaster() {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Fatalf("%s did not take over in 6 tries of CLUSTER FAILOVER", addr)
}

// replicaOf returns the address of a replica of the master at addr.
func replicaOf(t *testing.T, admin *redis.ClusterClient, addr string) string {
	t.Helper()
	var replica string
	waitFor(t, 20*time.Second, "a replica of "+addr, func() bool {
		shards, err := admin.ClusterShards(context.Background()).Result()
		if err != nil {
			return false
		}
		for _, sh := range shards {
			mine := false
			for _, n := range sh.Nodes {
				if n.Role == "master" && fmt.Sprintf("%s:%d", n.IP, n.Port) == addr {
					mine = true
				}
			}
			for _, n := range sh.Nodes {
				if mine && n.Role != "master" && n.Health == "online" {
					replica = fmt.Sprintf("%s:%d", n.IP, n.Port)
				}
			}
		}
		return replica != ""
	})
	return replica
}

// nodeID returns the Cluster node id of the node at addr.
func nodeID(t *testing.T, addr string) string {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	id, err := rc.ClusterMyID(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestClusterShardSubscriptionRefused: on a Cluster whose ACL denies
// SSUBSCRIBE, the Engine logs it once, stops subscribing to shard channels,
// and still hears every hand-over: the release's SPUBLISH reaches nobody,
// so it PUBLISHes on the waiting Engine's own channel.
func TestClusterShardSubscriptionRefused(t *testing.T) {
	if redistest.OwnReal(t) == nil { // redis-server is not on PATH
		return
	}
	set := ownSet(t, redistest.StartClusterSet)
	ctx := context.Background()
	for _, s := range set.Servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr})
		err := rc.Do(ctx, "ACL", "SETUSER", "default", "-ssubscribe").Err()
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	prefix := redistest.Prefix(t)
	var logged logBuffer
	recs := [2]*recorder{newRecorder(), newRecorder()}
	var engines [2]*Engine
	for i := range engines {
		rdb := set.Conf().Open(nil)
		t.Cleanup(func() { _ = rdb.Close() })
		opt := Options{Prefix: prefix, Events: recs[i]}
		if i == 1 {
			opt.Logger = slog.New(slog.NewTextHandler(&logged, nil))
		}
		e, err := New(rdb, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines[i] = e
	}
	admin := set.Conf().Open(nil)
	t.Cleanup(func() { _ = admin.Close() })
	k := mustKey(t, "refused")
	qkey := engines[0].redisKeys(k)[1]
	for i := range 10 {
		ls, err := engines[0].Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		got, errc := acquireAsync(engines[1], k, 5*time.Second)
		waitFor(t, 5*time.Second, "the waiter queued", func() bool { return admin.ZCard(ctx, qkey).Val() == 1 })
		before := recs[1].wokenBy(wokenByMessage)
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w := awaitLease(t, got, errc, 5*time.Second, "the waiter")
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if recs[1].wokenBy(wokenByMessage) == before {
			t.Errorf("hand-over %d: not woken by a message: %v", i, recs[1].woken)
		}
	}
	if !engines[1].nf.sh.off.Load() {
		t.Error("the Engine still subscribes to shard channels")
	}
	if n := strings.Count(logged.String(), "refuses shard subscriptions"); n != 1 {
		t.Errorf("logged %d times that shard subscriptions are refused: %s", n, logged.String())
	}
}
