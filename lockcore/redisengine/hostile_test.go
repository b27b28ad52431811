package redisengine

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestForgedTokens: tokens that are not the holder's — random ones, and
// near misses of the real one — never re-enter its lock nor release it, and
// no error repeats a token. A valid token that holds key A grants nothing
// on key B.
func TestForgedTokens(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		owner := newLocker(t, b, prefix, Options{})
		thief := newLocker(t, b, prefix, Options{})
		ctx := context.Background()
		k := mustKey(t, "victim", "1")
		ls, err := owner.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer ls.Release(ctx)
		real := ls.Token()
		rng := rand.New(rand.NewPCG(1, 2))
		const alphabet = "0123456789abcdef-"
		forged := []string{strings.ToUpper(real), real[:len(real)-1] + "x", real + "0", real[1:] + "0", "0" + real[:len(real)-1]}
		for range 500 {
			forged = append(forged, lifecycle.NewToken())
			b := make([]byte, 16+rng.IntN(40))
			for i := range b {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
			forged = append(forged, string(b))
		}
		for _, f := range forged {
			fctx, err := lifecycle.Intake(ctx, "Routelock-Token", []string{f}, nil)
			if err != nil || f == real {
				continue // the transports refuse it before any engine sees it
			}
			_, err = thief.Acquire(fctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
			if !errors.Is(err, lockcore.ErrNotAcquired) {
				t.Fatalf("forged token %q: %v, want ErrNotAcquired", f, err)
			}
			if msg := err.Error(); strings.Contains(msg, f) || strings.Contains(msg, real) {
				t.Fatalf("error repeats a token: %v", err)
			}
			h := thief.newHold(k, f, 0)
			h.setEntry(thief.nextID(time.Now()))
			if n, err := thief.release(ctx, h, ""); err != nil || n != -1 {
				t.Fatalf("release script with forged token %q: %d %v, want -1 (not the owner)", f, n, err)
			}
		}
		// Even the real token releases nothing without the hold's entry.
		h := thief.newHold(k, real, 0)
		h.setEntry(thief.nextID(time.Now()))
		if n, err := thief.release(ctx, h, ""); err != nil || n != -1 {
			t.Fatalf("release script with the real token and another entry: %d %v, want -1", n, err)
		}
		info := inspect(t, owner, k)
		if len(info.Holders) != 1 || holdCount(info, real) != 1 || info.Fence != ls.Fence() {
			t.Fatalf("after %d forgeries the lock is %+v", len(forged), info)
		}

		// The owner's valid token grants nothing on a key someone else holds.
		other := mustKey(t, "victim", "2")
		ls2, err := thief.Acquire(ctx, other, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer ls2.Release(ctx)
		if _, err := owner.Acquire(ls.Context(), other, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Fatalf("token of %v on %v held by another: %v", k, other, err)
		}
		if _, err := thief.Acquire(enginetest.WithToken(ctx, real), other, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Fatalf("token of %v, through Redis, on %v: %v", k, other, err)
		}
	})
}
