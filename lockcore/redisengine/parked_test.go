package redisengine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestGoneWriterDoesNotHoldOffReaders: a writer queued by an Engine whose
// process is gone (nobody reads its channel) is skipped at once by the
// release that hands the lock on, and the reader queued behind it is
// admitted. While that reader holds, nobody live waits for an exclusive
// turn: a reader that comes then, failing fast, gets in beside it, as it
// would with no queue. A gone writer left queued would keep every new
// reader out until the readers holding have all released.
func TestGoneWriterDoesNotHoldOffReaders(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a := lockerOn(t, b.Client(t), prefix, Options{})
		r := lockerOn(t, b.Client(t), prefix, Options{})
		k := mustKey(t, "gone-writer")
		q := a.redisKeys(k)[1]
		admin := b.Client(t)
		holder, err := a.Acquire(ctx, k, lifecycle.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute).UnixMilli()
		gone := redis.Z{
			Score:  float64(time.Now().UnixMicro() - 1000),
			Member: fmt.Sprintf("%d 30000 %snotify:gone gone.0.0 %s", deadline, prefix, lifecycle.NewToken()),
		}
		if err := admin.ZAdd(ctx, q, gone).Err(); err != nil {
			t.Fatal(err)
		}
		got := make(chan *lifecycle.Lease, 1)
		go func() {
			ls, err := r.Acquire(ctx, k, lifecycle.Policy{Share: lifecycle.ShareAll, Wait: 5 * time.Second})
			if err != nil {
				t.Errorf("the queued reader: %v", err)
			}
			got <- ls
		}()
		eventually(t, 5*time.Second, "the reader queued behind the gone writer", func() bool {
			return admin.ZCard(ctx, q).Val() == 2
		})
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		first := <-got
		if first == nil {
			t.FailNow()
		}
		defer func() { _ = first.Release(context.Background()) }()

		second, err := r.Acquire(ctx, k, lifecycle.Policy{Share: lifecycle.ShareAll, Wait: lockcore.FailFast})
		if err != nil {
			left, _ := admin.ZRangeWithScores(ctx, q, 0, -1).Result()
			t.Fatalf("a reader failing fast while only a reader holds and the writer queued ahead is gone: %v, want a lease (queue: %v)", err, left)
		}
		_ = second.Release(context.Background())
	})
}

// TestQueuedReaderKeepsPlaceAcrossDroppedSubscription: a reader queued
// while its Engine's subscription was up, which then dropped, keeps its
// place as a writer does (TestQueuedKeepsPlaceAcrossDroppedSubscription).
// Readers b and c queue in that order; b's subscription drops; the release
// admits c, which b could not hear of. A writer w then queues behind c. Once
// b's subscription is back and b asks again, b arrived before w: it enters
// beside c, and w waits for both.
func TestQueuedReaderKeepsPlaceAcrossDroppedSubscription(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		r := newDropRig(t, b)
		k, a, nb, waiting, asked, open := r.k, r.a, r.b, r.waiting, r.asked, r.open
		c, w := r.engine("c"), r.engine("w")

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := nb.nf.ping(ctx); err != nil {
			t.Fatal(err)
		}
		holder, err := a.Acquire(ctx, k, lifecycle.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan string, 3)
		let := make(chan struct{}) // every holder releases
		t.Cleanup(func() {
			select {
			case <-let:
			default:
				close(let)
			}
		})
		wait := func(e *Engine, name string, share int) {
			ls, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: 15 * time.Second, Share: share})
			if err != nil {
				t.Errorf("waiter on %s: %v", name, err)
				served <- "error"
				return
			}
			served <- name
			select {
			case <-let:
			case <-ctx.Done():
			}
			_ = ls.Release(context.Background())
		}
		queue := func(e *Engine, name string, share int) {
			go wait(e, name, share)
			select {
			case got := <-waiting:
				if got != name {
					t.Fatalf("reported waiting: %s, want %s", got, name)
				}
			case <-ctx.Done():
				t.Fatalf("the waiter on %s was never reported waiting", name)
			}
		}
		queue(nb, "b", lifecycle.ShareAll)
		queue(c, "c", lifecycle.ShareAll)

		r.drop() // b's subscription drops, and its new dial is held back
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := <-served; got != "c" {
			t.Fatalf("served %s first, want c: b's subscription was down", got)
		}
		queue(w, "w", 0) // behind the reader c, after b
		for len(asked) > 0 {
			<-asked
		}
		open()
		select {
		case <-asked:
		case <-ctx.Done():
			t.Fatal("b never asked for the lock again")
		}
		select {
		case got := <-served:
			if got != "b" {
				t.Fatalf("served %s while c reads, want b", got)
			}
		case <-time.After(3 * time.Second): // b asks again every 300 ms
			n, _ := a.rdb.ZRangeWithScores(ctx, a.redisKeys(k)[1], 0, -1).Result()
			t.Fatalf("b, queued before the writer w, is not let in beside c within 3 s (queue %v)", n)
		}
		close(let) // the readers release: the writer comes last
		if got := <-served; got != "w" {
			t.Fatalf("served %s last, want w", got)
		}
	})
}
