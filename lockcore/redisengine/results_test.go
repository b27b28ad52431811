package redisengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
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
		if err != nil || more || len(rs) != 1 || rs[0].Key != kept || rs[0].Size != int64(len(res)) ||
			time.Until(rs[0].Expires) > time.Minute || time.Until(rs[0].Expires) < 50*time.Second {
			t.Fatalf("StoredResults: %+v %v %v; want %v alone, of %d bytes, expiring in a minute", rs, more, err, kept, len(res))
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

// TestKeptResultWakesEveryWaiter: waiters that want the result, two on
// each of three Engines, queued behind a holder, are each told of the
// result it keeps by the Engines' subscriptions, at once, and get it
// without taking the key: none wakes by its timer (their rechecks are 18s
// apart, and the holder's lease has 10s left), none is granted the key,
// and the key is free afterwards, its queue empty. A small result comes
// with the message (the waiters wake by "message" and ask Redis nothing
// more); one over 4 KiB does not (they wake by "reply" and read it). The
// first in line is handed the key as well, as by any release, and finds
// the result with the call that claims it.
func TestKeptResultWakesEveryWaiter(t *testing.T) {
	for _, c := range []struct {
		name string
		size int
		by   string
	}{{"small", 4096, wokenByMessage}, {"large", 4097, wokenByReply}} {
		t.Run(c.name, func(t *testing.T) {
			redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
				wakeEveryWaiter(t, b, bytes.Repeat([]byte("\n\x00r"), c.size/3+1)[:c.size], c.by)
			})
		})
	}
}

func wakeEveryWaiter(t *testing.T, b *redistest.Backend, res []byte, by string) {
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	rec := newRecorder()
	var es []*Engine
	for range 3 {
		es = append(es, newLocker(t, b, prefix, Options{ClaimWindow: time.Minute, Events: rec}))
	}
	k := mustKey(t, "idempotency", "in line")
	for _, e := range es {
		// A subscription coming up has its waiters ask again, which could
		// find the result without a wake that follows the Keep.
		subscribed(t, e, k)
	}
	h, err := es[0].Take(ctx, lockcore.Request{Key: k, Token: "first", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 6
	type got struct {
		h   lockcore.Hold
		err error
	}
	gots := make(chan got, waiters)
	for i := range waiters {
		e := es[i%3]
		go func() {
			h, err := e.Take(ctx, lockcore.Request{Key: k, Token: fmt.Sprint("dup-", i), Wait: 15 * time.Second, Result: true})
			gots <- got{h, err}
		}()
	}
	eventually(t, 5*time.Second, "every duplicate queued", func() bool { return len(inspect(t, es[0], k).Waiters) == waiters })
	rec.mu.Lock()
	before := maps.Clone(rec.woken)
	rec.mu.Unlock()
	if err := es[0].Keep(ctx, k, h, res, time.Minute); err != nil {
		t.Fatalf("Keep: %v", err)
	}
	for range waiters {
		g := <-gots
		found, ok := errors.AsType[*lockcore.ResultFound](g.err)
		switch {
		case g.h != nil:
			t.Fatalf("a duplicate in line took the key (fence %d) after its result was kept", g.h.Fence())
		case !ok:
			t.Fatalf("a duplicate in line: %v, want a *lockcore.ResultFound", g.err)
		case !bytes.Equal(found.Result, res):
			t.Fatalf("a duplicate in line found %d bytes, want the %d kept", len(found.Result), len(res))
		}
	}
	rec.mu.Lock()
	woken := maps.Clone(rec.woken)
	rec.mu.Unlock()
	for w, n := range before {
		woken[w] -= n
	}
	// The first in line is handed the key too, as by any release: by
	// message, or, on the Engine that kept the result, by its reply; it
	// claims the key with a call, which finds the result.
	if woken[wokenByTimer] > 0 || woken[by] < waiters-1 || woken[wokenByMessage]+woken[wokenByReply] < waiters {
		t.Fatalf("after Keep the duplicates woke %v, want each but the first in line by %q, none by its timer", woken, by)
	}
	// Those told the result by message leave the queue in the background.
	eventually(t, 5*time.Second, "the queue emptied", func() bool {
		info := inspect(t, es[1], k)
		return len(info.Holders) == 0 && len(info.Waiters) == 0
	})
	free, err := es[2].Take(ctx, lockcore.Request{Key: k, Token: "plain", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatalf("a plain acquisition after the result was kept: %v, want the key", err)
	}
	_ = free.Release(ctx, nil)
}
