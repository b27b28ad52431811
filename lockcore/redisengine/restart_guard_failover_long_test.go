//go:build long

package redisengine

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestRestartGuardAfterFailover: the restart guard outlives a failover to
// a replica that received it. A master M and its replica R keep no
// append-only file; Engines reach the master through a client that dials
// whichever server is master now (as a Sentinel client does). Engine A
// holds a lock on M with a 3 s lease (MaxTTL 3 s); A is then cut off from
// Redis (its renewals fail, its context lives until its lease could have
// ended), and M restarts empty. R resynchronises from M, empty too, and
// receives the guard that B's refused acquisition set on M. R is promoted
// (M dies): R's run is not the one the guard was decided for, and R has
// been up longer than MaxTTL, so the guard script finds no restart of its
// own; but the guard it received still lives, and the holders it protects
// may still run. Engine C, made after the promotion, must not hold the
// lock while A's context is live. In the second case R was a master
// before (it has the scripts that take holds cached, which a replica
// keeps through a full resynchronisation), so C meets no NOSCRIPT there.
func TestRestartGuardAfterFailover(t *testing.T) {
	t.Run("replica-without-scripts", func(t *testing.T) { restartGuardAfterFailover(t, false) })
	t.Run("replica-formerly-master", func(t *testing.T) { restartGuardAfterFailover(t, true) })
}

func restartGuardAfterFailover(t *testing.T, formerMaster bool) {
	r := redistest.OwnVolatile(t) // started first: older than MaxTTL at the promotion
	if r == nil {
		return
	}
	m := redistest.OwnVolatile(t)
	const maxTTL = 3 * time.Second
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	admin := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	cm, cr := admin(m.Addr), admin(r.Addr)
	// R loads a full resynchronisation from the socket, writing no file.
	if err := cr.ConfigSet(ctx, "repl-diskless-load", "swapdb").Err(); err != nil {
		t.Fatal(err)
	}
	if formerMaster {
		// R served locks before: its start's guard ended and the scripts
		// that take holds were loaded.
		old := lockerOn(t, admin(r.Addr), prefix, Options{TTL: 50 * time.Millisecond, MaxTTL: 50 * time.Millisecond})
		eventually(t, time.Second, "R's scripts loaded", func() bool {
			return old.Check(ctx) == nil && cr.ScriptExists(ctx, acquireScript.sha[0].(string)).Val()[0]
		})
	}
	if err := cr.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(m.Port)).Err(); err != nil {
		t.Fatal(err)
	}
	var master atomic.Pointer[string]
	master.Store(&m.Addr)
	failover := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: "master", Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *master.Load())
		}})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var cut atomic.Bool
	aClient := redis.NewClient(&redis.Options{Addr: m.Addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if cut.Load() {
			return nil, errors.New("cut off")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { _ = aClient.Close() })

	warm := lockerOn(t, failover(), prefix, Options{TTL: 50 * time.Millisecond, MaxTTL: 50 * time.Millisecond})
	if err := warm.Check(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "the start's guard ended", func() bool {
		left, err := warm.RestartGuard(ctx)
		return err == nil && left == 0
	})
	a := lockerOn(t, aClient, prefix, Options{TTL: maxTTL, MaxTTL: maxTTL})
	key := mustKey(t, "restart", "failover")
	var holder *lifecycle.Lease
	var err error
	eventually(t, 2*time.Second, "A's acquire once the start's guard ended", func() bool {
		holder, err = a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		return err == nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)

	// R must be older than MaxTTL (in whole seconds, as INFO counts) when
	// it is promoted; A renews meanwhile.
	eventually(t, 2*maxTTL, "R up longer than MaxTTL", func() bool {
		info, err := cr.Info(ctx, "server").Result()
		if err != nil {
			return false
		}
		i := strings.Index(info, "uptime_in_seconds:")
		if i < 0 {
			return false
		}
		up, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(info[i+len("uptime_in_seconds:"):], "\r\n", 2)[0]))
		return time.Duration(up-1)*time.Second >= maxTTL
	})
	if holder.Context().Err() != nil {
		t.Fatalf("A's context ended before the restart: %v", context.Cause(holder.Context()))
	}

	cut.Store(true)
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// R resynchronises at once rather than after the default 5 s.
	if err := cm.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	b := lockerOn(t, failover(), prefix, Options{TTL: maxTTL, MaxTTL: maxTTL})
	var ge *lockcore.RestartGuardError
	eventually(t, time.Second, "B refused by the guard on the restarted master", func() bool {
		_, err := b.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		return errors.As(err, &ge)
	})
	eventually(t, 2*time.Second, "the guard on the replica", func() bool {
		return cr.PTTL(ctx, guardKey).Val() > 0
	})
	if err := cr.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	master.Store(&r.Addr)
	m.Kill()
	promoted := time.Now()
	guardLeft := cr.PTTL(ctx, guardKey).Val()

	c := lockerOn(t, failover(), prefix, Options{TTL: maxTTL, MaxTTL: maxTTL})
	refused := 0
	deadline := promoted.Add(maxTTL + time.Second)
	for holder.Context().Err() == nil && time.Now().Before(deadline) {
		ls, err := c.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err == nil {
			live := holder.Context().Err() == nil
			_ = ls.Release(ctx)
			if live {
				t.Fatalf("C holds the lock %v after the restart, %v after the promotion (the guard had %v left there), while A's context is live",
					time.Since(restarted).Round(time.Millisecond), time.Since(promoted).Round(time.Millisecond), guardLeft)
			}
			break
		}
		if !errors.Is(err, lockcore.ErrUnavailable) {
			t.Fatalf("C's refusal %v: want the restart guard's", err)
		}
		refused++
		time.Sleep(5 * time.Millisecond) // polling, bounded by deadline
	}
	if holder.Context().Err() == nil {
		t.Fatalf("A's context still live %v after the restart", time.Since(restarted).Round(time.Millisecond))
	}
	if refused == 0 {
		t.Fatal("A's context ended before C tried: the test proved nothing")
	}
	t.Logf("A's context ended %v after the restart, %v after the promotion; C was refused %d times meanwhile",
		time.Since(restarted).Round(time.Millisecond), time.Since(promoted).Round(time.Millisecond), refused)
}
