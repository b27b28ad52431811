//go:build long

package redisengine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestRestartGuardCluster: a Cluster master restarted without persistence,
// with no replica to take over, comes back empty and serving its slots;
// the restart guard must cover every slot it serves. On a Cluster of 3
// masters without replicas or persistence, engine A holds k1 (a 10 s lease)
// on master M; M is killed and started again at once. Engine B, made after
// the restart, first tries k2, another slot of M, so that the NOSCRIPT of
// the empty script cache is met on that slot, then k3 on another master,
// then k1 fail-fast until A's context ends. B must not hold k1 while A's
// context is live; k2 is refused by the guard too (ErrRestartGuard), k3 is
// not (the other masters lost nothing), and RestartGuard tells an operator
// how long M's guard lasts. A's context ends with ErrLockLost, and B gets
// k1 once the guard has ended.
func TestRestartGuardCluster(t *testing.T) {
	if redistest.OwnReal(t) == nil { // redis-server is not on PATH
		return
	}
	const long, short = 10 * time.Second, 300 * time.Millisecond
	set := ownSet(t, redistest.StartVolatileClusterSet)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	admin := set.Conf().Open(nil).(*redis.ClusterClient)
	t.Cleanup(func() { _ = admin.Close() })

	// The nodes have just started: a warm-up Engine with a bound of 50 ms
	// decides their guards, so that A gets in at once.
	warm := enginesOn(t, set, 1, Options{Prefix: prefix, TTL: 50 * time.Millisecond, MaxTTL: 50 * time.Millisecond})[0]
	waitFor(t, 10*time.Second, "the warm-up Engine's check", func() bool { return warm.Check(ctx) == nil })
	a := enginesOn(t, set, 1, Options{Prefix: prefix, TTL: long, MaxTTL: long})[0]

	// k1 and k2 on two slots of one master, k3 on another master.
	master := func(k lockcore.Key) (string, int) {
		hk := a.redisKeys(k)[0]
		c, err := admin.MasterForKey(ctx, hk)
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr, slotOf(hk)
	}
	k1 := mustKey(t, "cluster-restart", "k1")
	m, s1 := master(k1)
	var k2, k3 lockcore.Key
	for i := 0; i < 1000 && (k2 == (lockcore.Key{}) || k3 == (lockcore.Key{})); i++ {
		k := mustKey(t, "cluster-restart", fmt.Sprint("k", i))
		switch addr, s := master(k); {
		case addr == m && s != s1 && k2 == (lockcore.Key{}):
			k2 = k
		case addr != m && k3 == (lockcore.Key{}):
			k3 = k
		}
	}
	var srv *redistest.Server
	for _, s := range set.Servers {
		if s.Addr == m {
			srv = s
		}
	}
	if srv == nil || k2 == (lockcore.Key{}) || k3 == (lockcore.Key{}) {
		t.Fatalf("master %s of k1 not found, or no k2 %v / k3 %v", m, k2, k3)
	}

	holder, err := a.Acquire(ctx, k1, lifecycle.Policy{Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	// Restarted at once, well within A's first renewal (TTL/3), so that
	// B's call on k2 is the first to meet the restart.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	b := enginesOn(t, set, 1, Options{Prefix: prefix, TTL: short, MaxTTL: long})[0]

	// try acquires k fail-fast until it is held or refused by the guard.
	try := func(k lockcore.Key) (*lifecycle.Lease, error) {
		var ls *lifecycle.Lease
		var err error
		waitFor(t, 5*time.Second, "an answer from the restarted master", func() bool {
			ls, err = b.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
			return err == nil || errors.Is(err, lockcore.ErrRestartGuard) || !errors.Is(err, lockcore.ErrUnavailable)
		})
		return ls, err
	}
	ls, err := try(k2)
	if err == nil {
		_ = ls.Release(ctx)
		t.Fatalf("B holds k2, another slot of the restarted master, %v after the restart, while its guard should last %v",
			time.Since(restarted).Round(time.Millisecond), long)
	}
	if !errors.Is(err, lockcore.ErrRestartGuard) {
		t.Fatalf("B's refusal of k2: %v, want the restart guard's", err)
	}
	ls, err = try(k3)
	if err != nil {
		t.Fatalf("B on k3, on a master that did not restart: %v", err)
	}
	_ = ls.Release(ctx)
	if left, err := b.RestartGuard(ctx); err != nil || left <= 0 || left > long {
		t.Fatalf("RestartGuard: %v, %v; want 0 < left <= %v", left, err, long)
	}

	guarded := 0
	var got time.Duration
	deadline := restarted.Add(long + 3*time.Second)
	for time.Now().Before(deadline) {
		ls, err := b.Acquire(ctx, k1, lifecycle.Policy{Wait: lockcore.FailFast})
		if err == nil {
			live := holder.Context().Err() == nil
			_ = ls.Release(ctx)
			if live {
				t.Fatalf("B holds k1 %v after the restart (fence %d) while A's %v lease's context is live (fence %d)",
					time.Since(restarted).Round(time.Millisecond), ls.Fence(), long, holder.Fence())
			}
			got = time.Since(restarted)
			break
		}
		var ge *lockcore.RestartGuardError
		switch {
		case errors.As(err, &ge):
			if ge.RetryAfter <= 0 || ge.RetryAfter > long {
				t.Fatalf("B's refusal %v: want 0 < RetryAfter <= %v", err, long)
			}
			guarded++
		case errors.Is(err, lockcore.ErrUnavailable):
			// The Cluster still settling.
		default:
			t.Fatalf("B's refusal %v %v after the restart: want the restart guard's", err, time.Since(restarted).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded by deadline
	}
	if !errors.Is(context.Cause(holder.Context()), lockcore.ErrLockLost) {
		t.Fatalf("A's context: %v, want ended with ErrLockLost", context.Cause(holder.Context()))
	}
	if got == 0 {
		t.Fatalf("B never got k1 within %v of the restart", long+3*time.Second)
	}
	t.Logf("B got k1 %v after the restart, after A's context had ended; refused by the guard %d times before",
		got.Round(time.Millisecond), guarded)
}
