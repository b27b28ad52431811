package redisengine

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestKeepStoresWithTheRelease: a result kept with a live hold is stored
// and the key is free at once; one kept by a hold whose key vanished in
// Redis is not, and says the hold was lost; a re-sent keep of the stored
// one reports success and changes nothing; listing and dropping see the
// stored ones only.
func TestKeepStoresWithTheRelease(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		l, err := New(rdb, Options{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		take := func(k lockcore.Key) lockcore.Hold {
			t.Helper()
			h, err := l.Take(ctx, lockcore.Request{Key: k, Token: "tok-" + k.String(), Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
		kept, lost := mustKey(t, "idempotency", "a"), mustKey(t, "idempotency", "b")
		h := take(kept)
		res := bytes.Repeat([]byte{0, '\n', 0xff}, 1000)
		if err := l.Keep(ctx, kept, h, res, time.Minute); err != nil {
			t.Fatalf("Keep of a live hold: %v", err)
		}
		if got, ok, err := l.Result(ctx, kept); err != nil || !ok || !bytes.Equal(got, res) {
			t.Fatalf("Result after Keep: %d bytes, %v, %v; want the %d bytes kept", len(got), ok, err, len(res))
		}
		// Free: the next holder takes it at once.
		next := take(kept)
		// The same call again, as a client re-sends it after a lost reply:
		// it finds its own result and succeeds, storing nothing new.
		if err := l.Keep(ctx, kept, h, []byte("other"), time.Minute); err != nil {
			t.Fatalf("Keep re-sent: %v", err)
		}
		if got, _, _ := l.Result(ctx, kept); !bytes.Equal(got, res) {
			t.Fatalf("Keep re-sent stored %q", got)
		}
		// next keeps nothing when its key vanished.
		if err := rdb.Del(ctx, next.(*hold).keys[0]).Err(); err != nil {
			t.Fatal(err)
		}
		if err := l.Keep(ctx, kept, next, []byte("late"), time.Minute); !errors.Is(err, lockcore.ErrLockLost) {
			t.Fatalf("Keep of a hold whose key vanished: %v, want ErrLockLost", err)
		}
		if got, _, _ := l.Result(ctx, kept); !bytes.Equal(got, res) {
			t.Fatalf("a lost hold's Keep stored %q", got)
		}
		h = take(lost)
		if err := rdb.Del(ctx, h.(*hold).keys[0]).Err(); err != nil {
			t.Fatal(err)
		}
		if err := l.Keep(ctx, lost, h, []byte("late"), time.Minute); !errors.Is(err, lockcore.ErrLockLost) {
			t.Fatalf("Keep of a hold whose key vanished: %v, want ErrLockLost", err)
		}
		if _, ok, err := l.Result(ctx, lost); ok || err != nil {
			t.Fatalf("Result of a lost hold's key: %v %v, want none", ok, err)
		}
		rs, more, err := l.StoredResults(ctx, "", 10)
		if err != nil || more || len(rs) != 1 || rs[0].Key != kept || rs[0].Size < int64(len(res)) ||
			time.Until(rs[0].Expires) > time.Minute || time.Until(rs[0].Expires) < 50*time.Second {
			t.Fatalf("StoredResults: %+v %v %v; want %v alone, of %d bytes at least, expiring in a minute", rs, more, err, kept, len(res))
		}
		if ok, err := l.DropResult(ctx, kept); !ok || err != nil {
			t.Fatalf("DropResult: %v %v", ok, err)
		}
		if ok, err := l.DropResult(ctx, kept); ok || err != nil {
			t.Fatalf("DropResult again: %v %v, want false", ok, err)
		}
		if _, ok, _ := l.Result(ctx, kept); ok {
			t.Fatal("a dropped result is still there")
		}
	})
}
