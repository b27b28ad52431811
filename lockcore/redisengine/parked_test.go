package redisengine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
		holder, err := a.Acquire(ctx, k, lockcore.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute).UnixMilli()
		gone := redis.Z{
			Score:  float64(time.Now().UnixMicro() - 1000),
			Member: fmt.Sprintf("%d 30000 %snotify:gone gone.0.0 %s", deadline, prefix, lockcore.NewToken()),
		}
		if err := admin.ZAdd(ctx, q, gone).Err(); err != nil {
			t.Fatal(err)
		}
		got := make(chan *lockcore.Lease, 1)
		go func() {
			ls, err := r.Acquire(ctx, k, lockcore.Policy{Share: lockcore.ShareAll, Wait: 5 * time.Second})
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

		second, err := r.Acquire(ctx, k, lockcore.Policy{Share: lockcore.ShareAll, Wait: lockcore.FailFast})
		if err != nil {
			left, _ := admin.ZRangeWithScores(ctx, q, 0, -1).Result()
			t.Fatalf("a reader failing fast while only a reader holds and the writer queued ahead is gone: %v, want a lease (queue: %v)", err, left)
		}
		_ = second.Release(context.Background())
	})
}
