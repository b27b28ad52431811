package redisengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// waitFor waits, up to bound, until ok, polling every 20 ms.
func waitFor(t *testing.T, bound time.Duration, what string, ok func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(bound); !ok(); <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", bound, what)
		}
	}
}

// TestReplicaAcknowledgement: with Options.Replicas, an acquisition counts
// only once that many replicas acknowledged it. A master with 2 replicas
// grants with Replicas 2; asked for 3, or a server with none asked for 1,
// the acquisition fails with ErrUnavailable within about ReplicaTimeout,
// saying how many acknowledged, and the lock is free at once (the hold was
// given back). On a Cluster, whose masters have a replica each, the same
// with 1 and 2.
func TestReplicaAcknowledgement(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		if !b.Real() {
			return // miniredis has no WAIT
		}
		prefix := redistest.Prefix(t)
		have := map[string]int{"redis": 0, "sentinel": 2, "cluster": 1}[b.Name]
		other := lockerOn(t, b.Universal(t), prefix, Options{})
		for _, want := range []int{have, have + 1} {
			if want == 0 {
				continue
			}
			l := lockerOn(t, b.Universal(t), prefix, Options{Replicas: want, ReplicaTimeout: 50 * time.Millisecond})
			k := mustKey(t, "acked", fmt.Sprint(want))
			for _, p := range []lifecycle.Policy{{Wait: lockcore.FailFast}, {Wait: time.Second}} {
				start := time.Now()
				ls, err := l.Acquire(context.Background(), k, p)
				took := time.Since(start)
				if want <= have {
					if err != nil {
						t.Fatalf("Replicas %d of %d: %v", want, have, err)
					}
					if ls.Fence() <= 0 {
						t.Fatalf("fence %d", ls.Fence())
					}
					_ = ls.Release(context.Background())
					continue
				}
				if !errors.Is(err, lockcore.ErrUnavailable) || !strings.Contains(err.Error(), fmt.Sprintf("acknowledged by %d of %d replicas", have, want)) {
					t.Fatalf("Replicas %d of %d: %v, want ErrUnavailable saying how many acknowledged", want, have, err)
				}
				if took > time.Second {
					t.Errorf("the failed acquisition took %v", took)
				}
				waitFor(t, 2*time.Second, "the lock given back", func() bool {
					ls, err := other.Acquire(context.Background(), k, lifecycle.Policy{Wait: lockcore.FailFast})
					if err != nil {
						return false
					}
					_ = ls.Release(context.Background())
					return true
				})
			}
		}
	})
}

// TestReplicaShortfallIsNoOutage: too few replicas is an answer from
// Redis, not a network failure. Fifty acquisitions at once on a server
// without replicas, with Replicas 1, each fail with ErrUnavailable saying
// "acknowledged by 0 of 1 replicas"; none fails the calls that flew with
// it as if Redis were unreachable (before, a shortfall failed every call
// queued behind it unsent, withdrawals included, which left the holds
// until a background retry); every hold is given back at once; and
// nothing logs Redis as unreachable. An Options.ReplicaTimeout not shorter
// than Timeout is refused.
func TestReplicaShortfallIsNoOutage(t *testing.T) {
	if unreachable(&replicaError{acked: 0, want: 1}) {
		t.Fatal("a replica shortfall counts as Redis unreachable")
	}
	if _, err := New(redistest.InstantClient(t), Options{Replicas: 1, ReplicaTimeout: time.Second}); err == nil {
		t.Fatal("New took a ReplicaTimeout as long as Timeout")
	}
	b := redistest.Best(t)
	if !b.Real() {
		return // miniredis has no WAIT
	}
	var logged logBuffer
	prefix := redistest.Prefix(t)
	l := lockerOn(t, b.Universal(t), prefix, Options{Replicas: 1, ReplicaTimeout: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	rdb := b.Universal(t)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Acquire(context.Background(), mustKey(t, "short", fmt.Sprint(i)), lifecycle.Policy{Wait: lockcore.FailFast})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, lockcore.ErrUnavailable) || !strings.Contains(err.Error(), "acknowledged by 0 of 1 replicas") {
			t.Fatalf("an acquisition on a server without replicas: %v", err)
		}
	}
	waitFor(t, 500*time.Millisecond, "every hold given back", func() bool {
		for i := range 50 {
			if n, err := rdb.Exists(context.Background(), prefix+"{short:"+fmt.Sprint(i)+"}").Result(); err != nil || n != 0 {
				return false
			}
		}
		return true
	})
	if strings.Contains(logged.String(), "unreachable") {
		t.Errorf("a shortfall was logged as an outage: %s", logged.String())
	}
}

// TestReplicasDefault: replicas acknowledge acquisitions by default on a
// failover client (Sentinel), which then hands nothing over in memory, and
// on no other client; a negative Replicas turns it off anywhere, and a
// Timeout shorter than the default ReplicaTimeout leaves the WAIT half of
// it.
func TestReplicasDefault(t *testing.T) {
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	defer failover.Close()
	one := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer one.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	for _, tc := range []struct {
		name       string
		rdb        redis.UniversalClient
		opt        Options
		ack, hands int
	}{
		{"sentinel", failover, Options{}, 1, 0},
		{"sentinel, off", failover, Options{Replicas: -1}, 0, defaultLocalHandOvers},
		{"sentinel, 2", failover, Options{Replicas: 2}, 2, 0},
		{"one server", one, Options{}, 0, defaultLocalHandOvers},
		{"one server, off", one, Options{Replicas: -1}, 0, defaultLocalHandOvers},
		{"cluster", cluster, Options{}, 0, defaultLocalHandOvers},
	} {
		e, err := New(tc.rdb, tc.opt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_ = e.Close()
		if e.run.ack != tc.ack || e.opt.LocalHandOvers != tc.hands {
			t.Errorf("%s: replicas %d, hand-overs in memory %d; want %d, %d", tc.name, e.run.ack, e.opt.LocalHandOvers, tc.ack, tc.hands)
		}
	}
	e, err := New(failover, Options{Timeout: 60 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_ = e.Close()
	if e.opt.ReplicaTimeout != 30*time.Millisecond {
		t.Errorf("Timeout 60ms on Sentinel: ReplicaTimeout %v, want 30ms", e.opt.ReplicaTimeout)
	}
}

// TestKeepAcknowledgedByReplicas: with Options.Replicas, a release that
// keeps a result counts, as an acquisition does, only once the replicas
// acknowledged it: on a master whose replica follows, Keep succeeds; once
// the replica is gone, a Keep fails with ErrUnavailable saying how many
// acknowledged (the result may or may not survive a failover), is not
// logged as an outage, and is sent again in the background; the key is
// free either way.
func TestKeepAcknowledgedByReplicas(t *testing.T) {
	master, replica := redistest.OwnReal(t), redistest.OwnReal(t)
	if master == nil {
		return // no redis-server here: said so by OwnReal
	}
	ctx := context.Background()
	mc := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer mc.Close()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	if err := mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ReplicaOf(ctx, "127.0.0.1", fmt.Sprint(master.Port)).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the replica in sync", func() bool {
		info, err := mc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	var logged logBuffer
	resent := make(chan error, 16)
	l := lockerOn(t, mc, redistest.Prefix(t), Options{Replicas: 1, ReplicaTimeout: 500 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(&logged, nil)),
		OnReleaseError: func(_ lockcore.Key, err error) { resent <- err }})
	take := func(k lockcore.Key) lockcore.Hold {
		t.Helper()
		h, err := l.Take(ctx, lockcore.Request{Key: k, Token: lifecycle.NewToken(), Wait: lockcore.FailFast})
		if err != nil {
			t.Fatalf("Take(%v): %v", k, err)
		}
		return h
	}
	acked := mustKey(t, "keep", "acked")
	// Online in INFO before its first acknowledgement: the first Take may
	// find it not acknowledging yet.
	var first lockcore.Hold
	waitFor(t, 10*time.Second, "the replica acknowledging an acquisition", func() bool {
		h, err := l.Take(ctx, lockcore.Request{Key: acked, Token: lifecycle.NewToken(), Wait: lockcore.FailFast})
		first = h
		return err == nil
	})
	if err := l.Keep(ctx, acked, first, []byte("201"), time.Minute); err != nil {
		t.Fatalf("Keep with its replica following: %v", err)
	}
	short := mustKey(t, "keep", "short")
	h := take(short)
	replica.Stop()
	waitFor(t, 10*time.Second, "the master sees its replica gone", func() bool {
		info, err := mc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0")
	})
	err := l.Keep(ctx, short, h, []byte("201"), time.Minute)
	if !errors.Is(err, lockcore.ErrUnavailable) || !strings.Contains(err.Error(), "acknowledged by 0 of 1 replicas") {
		t.Fatalf("Keep with its replica gone: %v, want ErrUnavailable saying how many acknowledged", err)
	}
	if err := <-resent; !strings.Contains(err.Error(), "acknowledged by 0 of 1 replicas") {
		t.Fatalf("told of the Keep's failure: %v", err)
	}
	if res, ok, err := l.Result(ctx, short); err != nil || !ok || string(res) != "201" {
		t.Fatalf("the master's result after an unacknowledged Keep: %q, %v, %v; want it stored there", res, ok, err)
	}
	if n, err := mc.Exists(ctx, h.(*hold).keys[0]).Result(); err != nil || n != 0 {
		t.Fatalf("the hold after an unacknowledged Keep: %d, %v; want it released", n, err)
	}
	if strings.Contains(logged.String(), "unreachable") {
		t.Errorf("a shortfall was logged as an outage: %s", logged.String())
	}
}
