package redisengine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestRestartGuardOtherEngine: the restart guard protects the leases of
// every Engine on the server, not only the acquiring one's. Engine A holds
// a lock with a 3 s lease; Redis restarts without persistence; engine B,
// made after the restart, with a 300 ms TTL and no longer route, tries the
// same key fail-fast until A's context ends. B must not hold the lock while
// A's context is live: both declare the deployment's bound on leases,
// MaxTTL 3 s, and the guard lasts that long, whatever B's own TTL. B's
// refusals meanwhile say they are the guard's (ErrRestartGuard, matching
// ErrUnavailable), not a lock held by another owner. (The server's first
// start is decided by a warm-up Engine with a bound of 50 ms, so that A
// gets in at once.)
func TestRestartGuardOtherEngine(t *testing.T) {
	srv := redistest.OwnVolatile(t)
	if srv == nil {
		return
	}
	const long, short = 3 * time.Second, 300 * time.Millisecond
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	warm := lockerOn(t, defaultKind.client(t, srv.Addr), prefix, Options{TTL: 50 * time.Millisecond, MaxTTL: 50 * time.Millisecond})
	if err := warm.Check(ctx); err != nil {
		t.Fatal(err)
	}
	a := lockerOn(t, defaultKind.client(t, srv.Addr), prefix, Options{TTL: long, MaxTTL: long})
	key := mustKey(t, "restart", "other-engine")
	var holder *lifecycle.Lease
	var err error
	eventually(t, long+time.Second, "A's acquire once the start's guard ended", func() bool {
		holder, err = a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		return err == nil
	})
	defer holder.Release(ctx)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	b := lockerOn(t, defaultKind.client(t, srv.Addr), prefix, Options{TTL: short, MaxTTL: long})

	guarded := 0
	deadline := restarted.Add(long + time.Second)
	for holder.Context().Err() == nil && time.Now().Before(deadline) {
		ls, err := b.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err == nil {
			live := holder.Context().Err() == nil
			_ = ls.Release(ctx)
			if live {
				t.Fatalf("B (TTL %v) holds the lock %v after the restart (fence %d) while A's %v lease's context is live (fence %d)",
					short, time.Since(restarted).Round(time.Millisecond), ls.Fence(), long, holder.Fence())
			}
			break
		}
		var ge *lockcore.RestartGuardError
		switch {
		case errors.As(err, &ge):
			if !errors.Is(err, lockcore.ErrUnavailable) || errors.Is(err, lockcore.ErrNotAcquired) || ge.RetryAfter <= 0 || ge.RetryAfter > long {
				t.Fatalf("B's refusal %v: want one matching ErrRestartGuard and ErrUnavailable only, with 0 < RetryAfter <= %v", err, long)
			}
			guarded++
		case errors.Is(err, lockcore.ErrUnavailable):
			// The server still starting.
		default:
			t.Fatalf("B's refusal %v %v after the restart: want the restart guard's", err, time.Since(restarted).Round(time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond) // polling, bounded by deadline
	}
	if holder.Context().Err() == nil {
		t.Fatalf("A's context still live %v after the restart", time.Since(restarted).Round(time.Millisecond))
	}
	if !errors.Is(context.Cause(holder.Context()), lockcore.ErrLockLost) {
		t.Fatalf("A's context ended with %v, want ErrLockLost", context.Cause(holder.Context()))
	}
	if guarded == 0 {
		t.Fatal("B was never refused by the restart guard")
	}
	t.Logf("A's context ended %v after the restart; B was refused by the guard %d times meanwhile", time.Since(restarted).Round(time.Millisecond), guarded)
}

// TestOperatorOnlyGuard: an OperatorOnly engine, with the default MaxTTL (30 s),
// on a server started without persistence, decides no restart guard: its
// RestartGuard says 0 until an Engine that takes locks (MaxTTL 1 s) has
// decided it, and then that Engine's guard, not longer; its Acquire
// fails with ErrMisconfigured.
func TestOperatorOnlyGuard(t *testing.T) {
	srv := redistest.OwnVolatile(t)
	if srv == nil {
		return
	}
	const maxTTL = time.Second
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	obs := lockerOn(t, defaultKind.client(t, srv.Addr), prefix, Options{OperatorOnly: true})
	key := mustKey(t, "restart", "observer")
	if left, err := obs.RestartGuard(ctx); err != nil || left != 0 {
		t.Fatalf("the OperatorOnly engine's RestartGuard before any Engine decided: %v, %v; want 0", left, err)
	}
	if _, err := obs.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("the OperatorOnly engine's Acquire: %v, want ErrMisconfigured", err)
	}
	if _, _, err := obs.List(ctx, "", 0); err != nil {
		t.Fatal(err)
	}
	e := lockerOn(t, defaultKind.client(t, srv.Addr), prefix, Options{TTL: maxTTL / 2, MaxTTL: maxTTL})
	_, err := e.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
	var ge *lockcore.RestartGuardError
	if !errors.As(err, &ge) || ge.RetryAfter > maxTTL {
		t.Fatalf("first acquisition after the OperatorOnly engine's calls: %v, want the restart guard's refusal for at most %v", err, maxTTL)
	}
	if left, err := obs.RestartGuard(ctx); err != nil || left <= 0 || left > maxTTL {
		t.Fatalf("the OperatorOnly engine's RestartGuard while the guard lasts: %v, %v; want 0 < left <= %v", left, err, maxTTL)
	}
}
