package redisengine

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
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
		dropSubscription(t, nb, hook)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, err := a.Acquire(ctx, k, lifecycle.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan string, 2)
	wait := func(e *Engine, name string) {
		ls, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: 15 * time.Second})
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

// TestQueuedKeepsPlaceAcrossDroppedSubscription: a waiter queued while its
// Engine's subscription was up, which then dropped, keeps its place. On one
// server a hand-over that reaches no subscriber passes to the next waiter;
// the waiter that could not be told is passed over for that hand-over
// only, and is next once its subscription is back. Before, it was dropped
// from the queue and queued again behind everyone who came after it.
func TestQueuedKeepsPlaceAcrossDroppedSubscription(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		r := newDropRig(t, b)
		k, a, nb, waiting, asked, open := r.k, r.a, r.b, r.waiting, r.asked, r.open
		c, d := r.engine("c"), r.engine("d")

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
		let := map[string]chan struct{}{"b": make(chan struct{}), "c": make(chan struct{}), "d": make(chan struct{})}
		for _, ch := range let {
			t.Cleanup(func() {
				select {
				case <-ch:
				default:
					close(ch)
				}
			})
		}
		wait := func(e *Engine, name string) {
			ls, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: 15 * time.Second})
			if err != nil {
				t.Errorf("waiter on %s: %v", name, err)
				served <- "error"
				return
			}
			served <- name
			select {
			case <-let[name]:
			case <-ctx.Done():
			}
			_ = ls.Release(context.Background())
		}
		queue := func(e *Engine, name string) {
			go wait(e, name)
			select {
			case got := <-waiting:
				if got != name {
					t.Fatalf("reported waiting: %s, want %s", got, name)
				}
			case <-ctx.Done():
				t.Fatalf("the waiter on %s was never reported waiting", name)
			}
		}
		next := func() string {
			select {
			case s := <-served:
				return s
			case <-ctx.Done():
				t.Fatal("no waiter was served")
				return ""
			}
		}
		queue(nb, "b") // first in the queue, told on its subscription
		queue(c, "c")
		queue(d, "d")

		r.drop() // b's subscription drops, and its new dial is held back
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// b cannot be told: the lock passes to c.
		if got := next(); got != "c" {
			t.Fatalf("served %s first, want c: b's subscription was down", got)
		}
		// b's subscription comes back, and b asks Redis again.
		for len(asked) > 0 {
			<-asked
		}
		open()
		select {
		case <-asked:
		case <-ctx.Done():
			t.Fatal("b never asked for the lock again")
		}
		close(let["c"])
		if got := next(); got != "b" {
			t.Fatalf("served %s after c, want b, which queued before d", got)
		}
		close(let["b"])
		if got := next(); got != "d" {
			t.Fatalf("served %s last, want d", got)
		}
	})
}

// TestGoneWaitersParkedThenDropped: the waiters of an Engine whose process
// is gone (nobody reads their channel) are passed over at once by the
// release that hands the lock on, parked behind the live waiter queued
// after them, and dropped at the next hand-over nobody else is queued for:
// the queue is empty once the live waiter has released.
func TestGoneWaitersParkedThenDropped(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		a := lockerOn(t, b.Client(t), prefix, Options{})
		c := lockerOn(t, b.Client(t), prefix, Options{ClaimWindow: 10 * time.Second})
		k := mustKey(t, "gone")
		q := a.redisKeys(k)[1]
		admin := b.Client(t)
		holder, err := a.Acquire(ctx, k, lifecycle.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		const gone = 500
		arrived := float64(time.Now().UnixMicro())
		deadline := time.Now().Add(time.Minute).UnixMilli()
		zs := make([]redis.Z, gone)
		for i := range zs {
			zs[i] = redis.Z{
				Score:  arrived - float64(gone-i),
				Member: fmt.Sprintf("%d 30000 %snotify:gone gone.%d.0 %s", deadline, prefix, i, lifecycle.NewToken()),
			}
		}
		if err := admin.ZAdd(ctx, q, zs...).Err(); err != nil {
			t.Fatal(err)
		}
		got := make(chan *lifecycle.Lease, 1)
		go func() {
			ls, err := c.Acquire(ctx, k, lifecycle.Policy{Wait: 15 * time.Second})
			if err != nil {
				t.Errorf("the live waiter: %v", err)
			}
			got <- ls
		}()
		eventually(t, 5*time.Second, "the live waiter queued", func() bool {
			return admin.ZCard(ctx, q).Val() == gone+1
		})
		released := time.Now()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		ls := <-got
		if ls == nil {
			t.FailNow()
		}
		// Told by the release itself: not after a claim window (10 s) of
		// each gone waiter, nor after the live waiter's recheck (3 s).
		if d := time.Since(released); d > 2*time.Second {
			t.Fatalf("the live waiter got the lock %v after the release", d)
		}
		if n := admin.ZCard(ctx, q).Val(); n != gone {
			t.Fatalf("%d waiters queued while the live one holds, want the %d gone ones parked", n, gone)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := admin.ZCard(ctx, q).Val(); n != 0 {
			t.Fatalf("%d waiters left queued after the release, want the gone ones dropped", n)
		}
	})
}

// dropRig is what the tests of a subscription that drops work with: Engines
// on one backend whose waits are reported to waiting by name, "a" to hold
// the lock k, and "b", whose subscription drop drops and holds down until
// open; asked hears each acquire call of b's that names k.
type dropRig struct {
	t       *testing.T
	backend *redistest.Backend
	prefix  string
	k       lockcore.Key
	a, b    *Engine
	hook    *holdSubscription
	waiting chan string
	asked   chan struct{}
	open    func()
}

func newDropRig(t *testing.T, b *redistest.Backend) *dropRig {
	r := &dropRig{t: t, backend: b, prefix: redistest.Prefix(t), waiting: make(chan string, 8), asked: make(chan struct{}, 64)}
	r.k, _ = lockcore.NewKey("k")
	r.a = r.engineOn("a", b.Client(t))
	unblock := make(chan struct{})
	var once sync.Once
	r.open = func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(r.open)
	cb := b.Client(t)
	r.hook = &holdSubscription{unblock: unblock, key: r.a.redisKeys(r.k)[0], asked: r.asked, armed: new(atomic.Bool)}
	cb.AddHook(r.hook)
	r.b = r.engineOn("b", cb)
	return r
}

// engine returns a new Engine named name, on a client of its own.
func (r *dropRig) engine(name string) *Engine { return r.engineOn(name, r.backend.Client(r.t)) }

func (r *dropRig) engineOn(name string, rdb *redis.Client) *Engine {
	events := waitingEvents(func(delta int) {
		if delta > 0 {
			r.waiting <- name
		}
	})
	e, err := New(rdb, Options{Prefix: r.prefix, Events: events})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = e.Close() })
	return e
}

// drop drops b's subscription and holds its next dial back until open.
func (r *dropRig) drop() { dropSubscription(r.t, r.b, r.hook) }

// dropSubscription closes e's established subscription, whose client has
// hook, with hook armed to hold its next dial back, and waits until e
// knows it dropped.
func dropSubscription(t *testing.T, e *Engine, hook *holdSubscription) {
	t.Helper()
	hook.armed.Store(true)
	e.nf.mu.Lock()
	ps := e.nf.current
	e.nf.mu.Unlock()
	if ps == nil {
		t.Fatal("no established subscription to drop")
	}
	_ = ps.Close()
	for deadline := time.Now().Add(5 * time.Second); e.nf.live.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the subscription never dropped")
		}
		time.Sleep(time.Millisecond) // polling a flag, bounded above
	}
}
