package redisengine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestKeepLeavesPlainWaiterFirst: a plain waiter queued behind a holder
// that keeps a result is next, as behind one that releases: an
// acquisition failing fast right after the Keep finds the key taken
// (handed to the waiter), not free. Ten rounds, the waiter on another
// Engine than the holder's.
func TestKeepLeavesPlainWaiterFirst(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		prefix := redistest.Prefix(t)
		a, o := newLocker(t, b, prefix, Options{}), newLocker(t, b, prefix, Options{})
		passed := 0
		for r := range 10 {
			k := mustKey(t, "plain", fmt.Sprint("kept-", r))
			h, err := a.Take(ctx, lockcore.Request{Key: k, Token: fmt.Sprint("first-", r), Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			got, tried := make(chan error, 1), make(chan struct{})
			go func() {
				w, err := o.Take(ctx, lockcore.Request{Key: k, Token: fmt.Sprint("waiter-", r), Wait: 5 * time.Second})
				if err == nil {
					<-tried // held until the newcomer tried
					_ = w.Release(ctx, nil)
				}
				got <- err
			}()
			eventually(t, 5*time.Second, "the waiter queued", func() bool { return len(inspect(t, a, k).Waiters) == 1 })
			if err := a.Keep(ctx, k, h, []byte("done"), time.Minute); err != nil {
				t.Fatal(err)
			}
			if n, err := a.Take(ctx, lockcore.Request{Key: k, Token: fmt.Sprint("newcomer-", r), Wait: lockcore.FailFast}); err == nil {
				passed++
				_ = n.Release(ctx, nil)
			}
			close(tried)
			if err := <-got; err != nil {
				t.Fatalf("round %d: the waiter: %v", r, err)
			}
		}
		if passed > 0 {
			t.Fatalf("in %d rounds of 10 an acquisition failing fast right after a Keep took the key ahead of the waiter in line", passed)
		}
	})
}
