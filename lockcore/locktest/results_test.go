package locktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestKeepRefuses: Keep refuses, storing nothing, a hold of another
// engine, of another key, a shared hold, and a keep under a millisecond;
// a hold released before keeps nothing and is lost; StoredResults refuses
// a limit of 0; after Close the results are not read.
func TestKeepRefuses(t *testing.T) {
	ctx := bounded(t)
	e, other := new(locktest.Engine), new(locktest.Engine)
	k, k2 := key(t, "keep", "1"), key(t, "keep", "2")
	take := func(e *locktest.Engine, k lockcore.Key, share int) lockcore.Hold {
		t.Helper()
		h, err := e.Take(ctx, lockcore.Request{Key: k, Token: "tok", Share: share, Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for name, keep := range map[string]func() error{
		"another engine's hold": func() error { return e.Keep(ctx, k, take(other, k, 0), []byte("x"), time.Minute) },
		"another key's hold":    func() error { return e.Keep(ctx, k, take(e, k2, 0), []byte("x"), time.Minute) },
		"a shared hold":         func() error { return e.Keep(ctx, k, take(e, k, -1), []byte("x"), time.Minute) },
		"a keep of 0":           func() error { return e.Keep(ctx, k, take(e, k, 0), []byte("x"), 0) },
	} {
		if err := keep(); !errors.Is(err, lockcore.ErrMisconfigured) {
			t.Errorf("Keep of %s: %v, want ErrMisconfigured", name, err)
		}
		if _, ok, _ := e.Result(ctx, k); ok {
			t.Fatalf("Keep of %s stored a result", name)
		}
		for _, k := range []lockcore.Key{k, k2} {
			e.Lose(k)
		}
	}
	h := take(e, k, 0)
	if err := h.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Keep(ctx, k, h, []byte("x"), time.Minute); !errors.Is(err, lockcore.ErrLockLost) {
		t.Fatalf("Keep of a released hold: %v, want ErrLockLost", err)
	}
	if _, _, err := e.StoredResults(ctx, "", 0); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("StoredResults with limit 0: %v, want ErrMisconfigured", err)
	}
	if err := e.Keep(ctx, k, take(e, k, 0), []byte("x"), time.Minute); err != nil {
		t.Fatal(err)
	}
	_ = e.Close()
	if _, _, err := e.Result(context.Background(), k); !errors.Is(err, lockcore.ErrClosed) {
		t.Fatalf("Result after Close: %v, want ErrClosed", err)
	}
}
