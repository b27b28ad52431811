package redisengine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestGatesPerDatabase: Pub/Sub does not know databases, yet Engines with
// one Prefix on two databases of one server keep their gates apart: a
// gate closed on database 1 closes on another Engine there, never on
// database 0.
func TestGatesPerDatabase(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		p := redistest.Prefix(t)
		on := func(db int) *Engine {
			c := redis.NewClient(&redis.Options{Addr: b.Addr, DB: db})
			t.Cleanup(func() { _ = c.Close() })
			l, err := New(c, Options{Prefix: p})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			if err := l.nf.ping(context.Background()); err != nil {
				t.Fatal(err)
			}
			return l
		}
		prod, staging, staging2 := on(0), on(1), on(1)
		k := mustKey(t, "productID", "42")
		if err := staging.CloseGate(context.Background(), k, 0); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "the gate closed on the other Engine of database 1", func() bool {
			_, closed := isClosed(staging2.GateOf(context.Background(), k))
			return closed
		})
		if _, closed := isClosed(prod.GateOf(context.Background(), k)); closed {
			t.Fatal("a gate closed on database 1 closed on database 0")
		}
	})
}

// TestGateTidiedOnlyIfUnchanged: a gate whose time is up is dropped from
// Redis only when the hash still has it as it was read: one closed again
// meanwhile (a buyer found the product sold out once more) stays.
func TestGateTidiedOnlyIfUnchanged(t *testing.T) {
	b := redistest.Best(t)
	l := newLocker(t, b, redistest.Prefix(t), Options{})
	ctx := context.Background()
	k := mustKey(t, "productID", "42").String()
	admin := b.Client(t)
	tidy := func(was string) {
		t.Helper()
		cmds := []redis.Cmder{l.run.cmd(ctx, gateScript, []any{nil, nil, 1, l.gatesKey(), l.gatesChannel(), k, "", was})}
		if err := l.run.run(ctx, cmds); err != nil || cmds[0].Err() != nil {
			t.Fatal(err, cmds[0].Err())
		}
	}
	if err := admin.HSet(ctx, l.gatesKey(), k, "1000 0").Err(); err != nil { // closed again, until opened
		t.Fatal(err)
	}
	tidy("900 950") // as a reader saw it before: expired
	if v, err := admin.HGet(ctx, l.gatesKey(), k).Result(); err != nil || v != "1000 0" {
		t.Fatalf("a gate closed again after it was read as expired: %q %v, want kept", v, err)
	}
	tidy("1000 0")
	if n, _ := admin.HExists(ctx, l.gatesKey(), k).Result(); n {
		t.Fatal("an unchanged expired gate was not tidied")
	}
}

// TestSegmentGateMessage: a segment's gate (its key has a space,
// lifecycle.SegmentKey) closes on another Engine by the channel's
// message, well before the next reload of the hash; and opens so.
func TestSegmentGateMessage(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		p := redistest.Prefix(t)
		a, other := newLocker(t, b, p, Options{}), newLocker(t, b, p, Options{})
		for _, l := range []*Engine{a, other} {
			if err := l.nf.ping(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		seg := lifecycle.SegmentKey(mustKey(t, "productID", "42"), 3)
		if err := a.CloseGate(context.Background(), seg, time.Hour); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "the segment's gate closed on the other Engine", func() bool {
			g, closed := isClosed(other.GateOf(context.Background(), seg))
			d := g.Until.Sub(g.Since)
			return closed && g.Key == seg && d >= time.Hour && d <= time.Hour+2*time.Millisecond
		})
		if err := a.OpenGate(context.Background(), seg); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Second, "the segment's gate opened on the other Engine", func() bool {
			_, closed := isClosed(other.GateOf(context.Background(), seg))
			return !closed
		})
	})
}

// TestNewEngineRefusesClosedGate: a gate closed by one Engine refuses the
// very first acquisitions of an Engine started after it, 16 at once,
// failing fast and willing to wait: none gets the lock, each fails with
// ErrGateClosed. Five fresh Engines in turn, on every backend. A reader
// of the key still gets in on a fresh Engine.
func TestNewEngineRefusesClosedGate(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		p := redistest.Prefix(t)
		ctx := context.Background()
		k := mustKey(t, "productID", "42")
		if err := newLocker(t, b, p, Options{}).CloseGate(ctx, k, 0); err != nil {
			t.Fatal(err)
		}
		var got, refused, other int
		for range 5 {
			l := newLocker(t, b, p, Options{})
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pol := lifecycle.Policy{Wait: lockcore.FailFast}
					if i%2 == 1 {
						pol.Wait = time.Second
					}
					ls, err := l.Acquire(ctx, k, pol)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						got++
						_ = ls.Release(ctx)
					case errors.Is(err, lockcore.ErrGateClosed):
						refused++
					default:
						other++
						t.Errorf("first acquisitions of a new Engine: %v", err)
					}
				}()
			}
			wg.Wait()
		}
		if got != 0 || refused != 5*16 {
			t.Fatalf("first acquisitions of new Engines of a closed key: %d took it, %d refused, %d failed otherwise; want 0, %d, 0", got, refused, other, 5*16)
		}
		rd, err := newLocker(t, b, p, Options{}).Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, Share: lifecycle.ShareAll})
		if err != nil {
			t.Fatalf("a reader's first acquisition on a new Engine of a closed key: %v, want it held", err)
		}
		_ = rd.Release(ctx)
	})
}

// isClosed reads what Gatekeeper.GateOf returned: the gate, and whether it
// is closed. Panics on any other error: the test's engine answers gates.
func isClosed(g lockcore.Gate, err error) (lockcore.Gate, bool) {
	closed := errors.Is(err, lockcore.ErrGateClosed)
	if err != nil && !closed {
		panic(err)
	}
	return g, closed
}
