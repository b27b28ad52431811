package redisengine

import (
	"context"
	"testing"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestInspectSinceOutlivesFirstEntry: a free lock taken on the fast path
// (its since is its first entry's start) and re-entered from a second
// Engine under its token is one hold, taken once: when the first Engine's
// entry leaves, Inspect still says it was taken when it was, not when the
// re-entry began.
func TestInspectSinceOutlivesFirstEntry(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		a := newLocker(t, b, prefix, Options{})
		bl := newLocker(t, b, prefix, Options{})
		ctx := context.Background()
		key := mustKey(t, "since", "2")
		seed, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}) // seeds the fencing counter
		if err != nil {
			t.Fatal(err)
		}
		if err := seed.Release(ctx); err != nil {
			t.Fatal(err)
		}
		outer, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}) // the fast path: since is 0 in Redis
		if err != nil {
			t.Fatal(err)
		}
		taken := inspect(t, a, key).Holders[0].Since
		inner, err := bl.Acquire(enginetest.WithToken(ctx, outer.Token()), key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer inner.Release(ctx)
		if got := inspect(t, a, key).Holders[0].Since; !got.Equal(taken) {
			t.Fatalf("since %v after the re-entry, want %v", got, taken)
		}
		if err := outer.Release(ctx); err != nil {
			t.Fatal(err)
		}
		info := inspect(t, a, key)
		if holdCount(info, outer.Token()) != 1 {
			t.Fatalf("after the first entry left: %+v; want the re-entered hold", info)
		}
		if got := info.Holders[0].Since; !got.Equal(taken) {
			t.Errorf("since %v once the first entry left, want %v (the hold was taken then; %v later is when the re-entry began)",
				got, taken, got.Sub(taken))
		}
	})
}
