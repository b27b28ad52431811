package redisengine

import (
	"context"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestQueuedOnlyOnceSubscribed: an Engine whose subscription is not up yet
// does not queue its waiters. On one server a hand-over that reaches no
// subscriber passes to the next waiter, so a waiter queued before its
// Engine could hear of a grant would lose its place: reported waiting
// first, served second. Here the new Engine's subscription is held back
// until after the lock changed hands; the waiters reported waiting must be
// served in the order they were reported.
func TestQueuedOnlyOnceSubscribed(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) { queuedOnlySubscribed(t, b, false) })
}

// TestQueuedOnlyOnceResubscribed: the same, when the Engine's subscription
// dropped and is being established again.
func TestQueuedOnlyOnceResubscribed(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) { queuedOnlySubscribed(t, b, true) })
}

// queuedOnlySubscribed is TestQueuedOnlyOnceSubscribed, with a new Engine,
// or, with reconnect, with one whose subscription was up and dropped.
func queuedOnlySubscribed(t *testing.T, b *redistest.Backend, reconnect bool) {
	prefix := redistest.Prefix(t)
	k, _ := lockcore.NewKey("k")
	var mu sync.Mutex
	var waited []string // which Engine's waiter was reported waiting, in order
	events := func(name string) lockcore.Events {
		return waitingEvents(func(delta int) {
			if delta > 0 {
				mu.Lock()
				waited = append(waited, name)
				mu.Unlock()
			}
		})
	}
	waitedNow := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(waited)
	}

	a, err := New(b.Client(t), Options{Prefix: prefix, Events: events("a")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	lockKey := a.redisKeys(k)[0]

	unblock := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(open)
	asked := make(chan struct{}, 16) // the new Engine sent an acquire call for the key
	cb := b.Client(t)
	hook := &holdSubscription{unblock: unblock, key: lockKey, asked: asked}
	if reconnect {
		hook.armed = new(atomic.Bool)
	}
	cb.AddHook(hook)
	nb, err := New(cb, Options{Prefix: prefix, Events: events("b")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nb.Close() })
	if reconnect {
		// Up once, then dropped; the new dial is held back.
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := nb.nf.ping(wctx)
		wcancel()
		if err != nil {
			t.Fatal(err)
		}
		hook.armed.Store(true)
		nb.nf.mu.Lock()
		ps := nb.nf.current
		nb.nf.mu.Unlock()
		if ps == nil {
			t.Fatal("no established subscription to drop")
		}
		_ = ps.Close()
		for deadline := time.Now().Add(5 * time.Second); nb.nf.live.Load(); {
			if time.Now().After(deadline) {
				t.Fatal("the subscription never dropped")
			}
			time.Sleep(time.Millisecond) // polling a flag, bounded above
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, err := a.Acquire(ctx, k, lockcore.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan string, 2)
	wait := func(e lockcore.Engine, name string) {
		ls, err := e.Acquire(ctx, k, lockcore.Policy{Wait: 15 * time.Second})
		if err != nil {
			t.Errorf("waiter on %s: %v", name, err)
			served <- "error"
			return
		}
		served <- name // before the release: the other gets the lock after it
		_ = ls.Release(context.Background())
	}
	go wait(nb, "b")
	select {
	case <-asked:
	case <-ctx.Done():
		t.Fatal("the new Engine's waiter never asked Redis for the lock")
	}
	go wait(a, "a")
	for !slices.Contains(waitedNow(), "a") {
		select {
		case <-ctx.Done():
			t.Fatalf("the waiter on a was never reported waiting (reported: %v)", waitedNow())
		case <-time.After(time.Millisecond):
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		if len(got) == 1 {
			open() // the new Engine may subscribe now that the lock changed hands
		}
		select {
		case s := <-served:
			got = append(got, s)
		case <-ctx.Done():
			t.Fatalf("served so far %v", got)
		}
	}
	// A waiter that found the lock free on a later call was never
	// reported waiting; those that were are served in that order.
	w := waitedNow()
	inQueue := slices.DeleteFunc(slices.Clone(got), func(s string) bool { return !slices.Contains(w, s) })
	if !slices.Equal(inQueue, w) {
		t.Fatalf("waiters served in order %v, but reported waiting in order %v", got, w)
	}
}

// waitingEvents is an Events that reports Waiting calls to a function.
type waitingEvents func(delta int)

func (f waitingEvents) Waiting(_ lockcore.Key, delta int) { f(delta) }
func (waitingEvents) Woken(lockcore.Key, string)          {}
func (waitingEvents) Renewed(lockcore.Key, error)         {}
func (waitingEvents) Ended(context.Context, lockcore.Key, time.Duration, time.Duration, error, error) {
}

// holdSubscription holds back a client's subscription connections (dials
// made by a PubSub) until unblock is closed, and tells asked of each
// script call that names key.
type holdSubscription struct {
	unblock <-chan struct{}
	armed   *atomic.Bool // if set, dials are held back only while it is true
	key     string
	asked   chan<- struct{}
}

func (h *holdSubscription) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		pcs := make([]uintptr, 64)
		frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
		for {
			f, more := frames.Next()
			if strings.Contains(f.Function, "(*PubSub)") && (h.armed == nil || h.armed.Load()) {
				select {
				case <-h.unblock:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				break
			}
			if !more {
				break
			}
		}
		return next(ctx, network, addr)
	}
}

func (h *holdSubscription) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if strings.HasPrefix(cmd.Name(), "eval") {
			for _, a := range cmd.Args() {
				if s, ok := a.(*string); ok && *s == h.key || a == h.key {
					select {
					case h.asked <- struct{}{}:
					default:
					}
					break
				}
			}
		}
		return err
	}
}

func (h *holdSubscription) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			_ = h.ProcessHook(func(context.Context, redis.Cmder) error { return nil })(ctx, c)
		}
		return err
	}
}
