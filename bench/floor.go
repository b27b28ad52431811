package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// floor is not a lock between processes: it queues its waiters in memory and
// only the hand-over goes through Redis, as one PUBLISH on a channel that a
// shared subscription reads. It does less than any lock whose waiter learns
// from Redis that it holds the lock, so its W2 rate is the most such a lock
// can reach on the machine measured: the release's trip to Redis and the
// message's trip back, with no script, key or queue in Redis. It runs in the
// one-process W2 rows only.
type floor struct {
	rdb     redis.UniversalClient
	sub     *redis.PubSub
	channel string

	mu      sync.Mutex
	keys    map[string]*floorKey
	waiters map[int64]*floorWaiter // handed over, message not yet read
	nextID  int64
	done    chan struct{}
}

type floorKey struct {
	held  bool
	queue []*floorWaiter
}

type floorWaiter struct {
	id   int64
	wake chan struct{} // closed when the waiter holds the key
}

func newFloor(t Target, cmds *atomic.Int64) (Mutexer, error) {
	rdb, err := t.Client(0, false, cmds)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	channel := "bench:floor:" + token()
	sub := rdb.Subscribe(ctx, channel)
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		_ = rdb.Close()
		return nil, err
	}
	f := &floor{rdb: rdb, sub: sub, channel: channel, keys: map[string]*floorKey{}, waiters: map[int64]*floorWaiter{}, done: make(chan struct{})}
	go f.read()
	return f, nil
}

// read wakes the waiter each message names.
func (f *floor) read() {
	defer close(f.done)
	for {
		m, err := f.sub.ReceiveMessage(context.Background())
		if err != nil {
			return
		}
		id, err := strconv.ParseInt(m.Payload, 10, 64)
		if err != nil {
			continue
		}
		f.mu.Lock()
		w := f.waiters[id]
		delete(f.waiters, id)
		f.mu.Unlock()
		if w != nil {
			close(w.wake)
		}
	}
}

func (f *floor) Lock(ctx context.Context, key string, wait bool) (func(), error) {
	f.mu.Lock()
	k := f.keys[key]
	if k == nil {
		k = &floorKey{}
		f.keys[key] = k
	}
	if !k.held {
		k.held = true
		f.mu.Unlock()
		return func() { f.unlock(key) }, nil
	}
	if !wait {
		f.mu.Unlock()
		return nil, ErrBusy
	}
	f.nextID++
	w := &floorWaiter{id: f.nextID, wake: make(chan struct{})}
	k.queue = append(k.queue, w)
	f.mu.Unlock()

	select {
	case <-w.wake:
		return func() { f.unlock(key) }, nil
	case <-ctx.Done():
	}
	f.mu.Lock()
	for i, q := range k.queue {
		if q == w {
			k.queue = append(k.queue[:i], k.queue[i+1:]...)
			f.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	f.mu.Unlock()
	// Handed over as the caller gave up: pass the key on once the message
	// arrives, or after a second if it never does.
	select {
	case <-w.wake:
		f.unlock(key)
	case <-time.After(time.Second):
	}
	return nil, ctx.Err()
}

// unlock hands the key to the first waiter by a PUBLISH naming it, or frees
// it when nobody waits.
func (f *floor) unlock(key string) {
	f.mu.Lock()
	k := f.keys[key]
	if len(k.queue) == 0 {
		k.held = false
		f.mu.Unlock()
		return
	}
	w := k.queue[0]
	k.queue = k.queue[1:]
	f.waiters[w.id] = w
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := f.rdb.Publish(ctx, f.channel, strconv.FormatInt(w.id, 10)).Err(); err != nil {
		// Without the message the waiter would never wake: wake it here,
		// unless the message went out after all and read woke it.
		f.mu.Lock()
		_, lost := f.waiters[w.id]
		delete(f.waiters, w.id)
		f.mu.Unlock()
		if lost {
			close(w.wake)
		}
	}
}

func (f *floor) Close() {
	_ = f.sub.Close()
	<-f.done
	_ = f.rdb.Close()
}
