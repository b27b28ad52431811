package redisengine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// fencedSet is a fencing-aware store: it writes value under key only if
// fence is at least the fence of the last write, atomically in Redis.
// It reports whether the write was accepted.
var fencedSetScript = redis.NewScript(`
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) < last then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1`)

func fencedSet(ctx context.Context, rdb redis.Scripter, key string, fence int64, value string) (bool, error) {
	n, err := fencedSetScript.Run(ctx, rdb, []string{key}, fence, value).Int()
	return n == 1, err
}

// The child process: the test binary run again with ROUTELOCK_CHILD set.
// ROUTELOCK_CHILD=wait and =ring run the modes of promise_test.go
// (childWaitMain, childRingMain). Otherwise it takes the lock, says
// "held <fence>", and then obeys lines on stdin: "write <store key> <value>"
// writes through the fenced store and answers "write ok|stale lost=<bool>".
// It exits when stdin closes.
func childMain() int {
	switch os.Getenv("ROUTELOCK_CHILD") {
	case "wait":
		return childWaitMain()
	case "ring":
		return childRingMain()
	}
	addr, prefix, key := os.Getenv("ROUTELOCK_CHILD_ADDR"), os.Getenv("ROUTELOCK_CHILD_PREFIX"), os.Getenv("ROUTELOCK_CHILD_KEY")
	ttl, _ := time.ParseDuration(os.Getenv("ROUTELOCK_CHILD_TTL"))
	share, _ := strconv.Atoi(os.Getenv("ROUTELOCK_CHILD_SHARE"))
	rdb := redis.NewClient(&redis.Options{Addr: addr}) // go-redis's defaults, as users run it
	defer rdb.Close()
	l, err := New(rdb, Options{Prefix: prefix})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer l.Close()
	ctx := context.Background()
	ls, err := l.Acquire(ctx, childKey(key), lifecycle.Policy{Wait: lockcore.FailFast, TTL: ttl, Share: share})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("held", ls.Fence())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 3 && f[0] == "write" {
			lost := ls.Err() != nil                                // a careful holder checks first …
			ok, err := fencedSet(ctx, rdb, f[1], ls.Fence(), f[2]) // … but writes anyway, to test the store
			switch {
			case err != nil:
				fmt.Println("error", err)
			case ok:
				fmt.Println("write ok lost=" + strconv.FormatBool(lost))
			default:
				fmt.Println("write stale lost=" + strconv.FormatBool(lost))
			}
		}
	}
	_ = ls.Release(ctx)
	return 0
}

// child is a running child process holding a lock.
type child struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	fence int64
}

func startChild(t *testing.T, addr, prefix string, key lockcore.Key, ttl time.Duration) *child {
	t.Helper()
	return startSharer(t, addr, prefix, key, ttl, 0)
}

// startSharer is startChild for a hold with Policy.Share share.
func startSharer(t *testing.T, addr, prefix string, key lockcore.Key, ttl time.Duration, share int) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ROUTELOCK_CHILD=1", "ROUTELOCK_CHILD_ADDR="+addr,
		"ROUTELOCK_CHILD_PREFIX="+prefix, "ROUTELOCK_CHILD_KEY="+key.String(), "ROUTELOCK_CHILD_TTL="+ttl.String(),
		"ROUTELOCK_CHILD_SHARE="+strconv.Itoa(share))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(outPipe)}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := c.line(t)
	if _, err := fmt.Sscanf(line, "held %d", &c.fence); err != nil {
		t.Fatalf("child: %q", line)
	}
	return c
}

// line reads the child's next line, failing the test after 10s.
func (c *child) line(t *testing.T) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		if c.out.Scan() {
			got <- c.out.Text()
		} else {
			got <- "EOF"
		}
	}()
	select {
	case l := <-got:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("child said nothing for 10s")
		return ""
	}
}

// TestCrashedHolder: a process holding a lock is killed with SIGKILL; the
// lock frees within its TTL and the next waiter proceeds, with a greater
// fencing token.
func TestCrashedHolder(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		const ttl = 500 * time.Millisecond
		k := mustKey(t, "crash", "1")
		c := startChild(t, b.Addr, prefix, k, ttl)
		l := newLocker(t, b, prefix, Options{})
		if _, err := l.Acquire(context.Background(), k, lifecycle.Policy{Wait: lockcore.FailFast}); !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Fatalf("while the child holds: %v", err)
		}
		got := make(chan time.Time, 1)
		var ls *lifecycle.Lease
		var aerr error
		go func() {
			ls, aerr = l.Acquire(context.Background(), k, lifecycle.Policy{Wait: 10 * time.Second})
			got <- time.Now()
		}()
		eventually(t, 5*time.Second, "the waiter queues", func() bool { return len(inspect(t, l, k).Waiters) == 1 })
		killed := time.Now()
		if err := c.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		at := <-got
		if aerr != nil {
			t.Fatal(aerr)
		}
		defer ls.Release(context.Background())
		took := at.Sub(killed)
		t.Logf("holder killed; the waiter got the lock %v later (TTL %v)", took, ttl)
		if took > ttl+250*time.Millisecond {
			t.Fatalf("waiter got in %v after the kill, TTL is %v", took, ttl)
		}
		if ls.Fence() <= c.fence {
			t.Fatalf("fence %d after the crash, %d before", ls.Fence(), c.fence)
		}
	})
}

// TestCrashedPermitHolder: of two permits, one is held here and one by a
// process killed with SIGKILL; a waiter for a permit gets the crashed
// holder's slot within its TTL, with a greater fence, and no more than two
// permits are ever held.
func TestCrashedPermitHolder(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		const ttl = 500 * time.Millisecond
		k := mustKey(t, "crash", "permits")
		l := newLocker(t, b, prefix, Options{})
		mine, err := l.Acquire(context.Background(), k, lifecycle.Policy{Wait: lockcore.FailFast, Share: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer mine.Release(context.Background())
		c := startSharer(t, b.Addr, prefix, k, ttl, 2)
		if _, err := l.Acquire(context.Background(), k, lifecycle.Policy{Wait: lockcore.FailFast, Share: 2}); !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Fatalf("a third permit of two: %v", err)
		}
		got := make(chan time.Time, 1)
		var ls *lifecycle.Lease
		var aerr error
		go func() {
			ls, aerr = l.Acquire(context.Background(), k, lifecycle.Policy{Wait: 10 * time.Second, Share: 2})
			got <- time.Now()
		}()
		eventually(t, 5*time.Second, "the waiter queues", func() bool { return len(inspect(t, l, k).Waiters) == 1 })
		killed := time.Now()
		if err := c.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		at := <-got
		if aerr != nil {
			t.Fatal(aerr)
		}
		defer ls.Release(context.Background())
		took := at.Sub(killed)
		t.Logf("permit holder killed; the waiter got its permit %v later (TTL %v)", took, ttl)
		if took > ttl+350*time.Millisecond {
			t.Fatalf("waiter got in %v after the kill, TTL is %v", took, ttl)
		}
		mySlot, _ := mine.Slot()
		if slot, ok := ls.Slot(); !ok || slot != 1-mySlot || ls.Fence() <= c.fence {
			t.Fatalf("the waiter: slot %d (%v), fence %d; want slot %d, fence above the crashed holder's %d", slot, ok, ls.Fence(), 1-mySlot, c.fence)
		}
		if info := inspect(t, l, k); len(info.Holders) != 2 {
			t.Fatalf("holders after the crash: %+v, want 2", info.Holders)
		}
	})
}

// TestQueuedReaderBehindCrashedReader: a reader killed with SIGKILL leaves
// its entry in Redis until a purge, while another reader holds on; a
// writer queues, and a reader queues behind it. The queued reader asks
// Redis again only at its recheck interval, not in a loop: it counts
// fewer than 20 calls in a second, where one that took the crashed
// entry's past lease end for its wait would make hundreds.
func TestQueuedReaderBehindCrashedReader(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		k := mustKey(t, "crash", "reader")
		c := startSharer(t, b.Addr, prefix, k, 100*time.Millisecond, lifecycle.ShareAll)
		l := newLocker(t, b, prefix, Options{})
		reader, err := l.Acquire(context.Background(), k, lifecycle.Policy{Wait: lockcore.FailFast, Share: lifecycle.ShareAll})
		if err != nil {
			t.Fatal(err)
		}
		defer reader.Release(context.Background())
		if err := c.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = c.cmd.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			if ls, err := l.Acquire(ctx, k, lifecycle.Policy{Wait: 30 * time.Second}); err == nil {
				_ = ls.Release(context.Background())
			}
		}()
		eventually(t, 5*time.Second, "the writer queues", func() bool { return len(inspect(t, l, k).Waiters) == 1 })
		eventually(t, 5*time.Second, "the crashed reader's lease ends", func() bool { return len(inspect(t, l, k).Holders) == 1 })

		var n atomic.Int64
		rdb := redis.NewClient(&redis.Options{Addr: b.Addr})
		rdb.AddHook(&countHook{n: &n})
		defer rdb.Close()
		queued, err := New(rdb, Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		defer queued.Close()
		if err := queued.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		n.Store(0)
		_, err = queued.Acquire(context.Background(), k, lifecycle.Policy{Wait: time.Second, Share: lifecycle.ShareAll})
		if !errors.Is(err, lockcore.ErrWaitTimeout) {
			t.Fatalf("the reader queued behind the writer: %v, want ErrWaitTimeout", err)
		}
		t.Logf("the queued reader made %d calls in its 1s wait", n.Load())
		if n.Load() >= 20 {
			t.Fatalf("the queued reader made %d calls in its 1s wait: it polls", n.Load())
		}
	})
}

// TestPausedHolder: a holder stopped with SIGSTOP past its TTL loses the
// lock to another process; when it resumes, its lease reports the loss and
// its write through the fenced store is refused as stale.
func TestPausedHolder(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		const ttl = 300 * time.Millisecond
		k := mustKey(t, "pause", "1")
		store := prefix + "store"
		c := startChild(t, b.Addr, prefix, k, ttl)
		if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		l := newLocker(t, b, prefix, Options{})
		rdb := b.Client(t)
		ctx := context.Background()
		ls, err := l.Acquire(ctx, k, lifecycle.Policy{Wait: 10 * time.Second}) // gets in once the TTL runs out
		if err != nil {
			t.Fatal(err)
		}
		if ls.Fence() <= c.fence {
			t.Fatalf("fence %d after the pause, %d before", ls.Fence(), c.fence)
		}
		if ok, err := fencedSet(ctx, rdb, store, ls.Fence(), "new holder"); !ok || err != nil {
			t.Fatalf("new holder's write: %v %v", ok, err)
		}
		if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c.in, "write %s paused-holder\n", store)
		if got := c.line(t); got != "write stale lost=true" {
			t.Fatalf("resumed holder: %q, want its lease lost and its write refused", got)
		}
		if v, _ := rdb.HGet(ctx, store, "value").Result(); v != "new holder" {
			t.Fatalf("store holds %q", v)
		}
		_ = ls.Release(ctx)
		c.in.Close()
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child: %v", err)
		}
	})
}

// TestRedisRestart: Redis restarts without persistence while leases are
// held. Every holder learns its lease is lost, and the fencing tokens issued
// after the restart are greater than those before: they follow the server's
// clock in microseconds, which the restart does not set back.
func TestRedisRestart(t *testing.T) {
	run := func(t *testing.T, addr string, restart func()) {
		rdb := redis.NewClient(&redis.Options{Addr: addr}) // go-redis's defaults
		defer rdb.Close()
		l, err := New(rdb, Options{Prefix: redistest.Prefix(t), TTL: 600 * time.Millisecond, MaxTTL: 600 * time.Millisecond, ReleaseTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		var leases []*lifecycle.Lease
		var before int64
		// A server that has just started may have lost held locks: its
		// restart guard lets nobody in for MaxTTL.
		eventually(t, 5*time.Second, "acquire once the server's restart guard ended", func() bool {
			ls, err := l.Acquire(ctx, mustKey(t, "restart", "first"), lifecycle.Policy{Wait: lockcore.FailFast})
			if err == nil {
				_ = ls.Release(ctx)
			}
			return err == nil
		})
		for i := range 8 {
			k := mustKey(t, "restart", strconv.Itoa(i))
			for range 20 { // many fresh holds, so that fences run ahead of the clock
				ls, err := l.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil {
					t.Fatal(err)
				}
				before = max(before, ls.Fence())
				_ = ls.Release(ctx)
			}
			ls, err := l.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			before = max(before, ls.Fence())
			leases = append(leases, ls)
		}
		restart()
		for i, ls := range leases {
			select {
			case <-ls.Context().Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("lease %d not lost 5s after the restart", i)
			}
			if !errors.Is(ls.Err(), lockcore.ErrLockLost) {
				t.Fatalf("lease %d: %v, want ErrLockLost", i, ls.Err())
			}
			_ = ls.Release(ctx)
		}
		var after int64
		eventually(t, 5*time.Second, "acquire after the restart", func() bool {
			ls, err := l.Acquire(ctx, mustKey(t, "restart", "0"), lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				return false
			}
			after = ls.Fence()
			_ = ls.Release(ctx)
			return true
		})
		t.Logf("last fence before the restart %d, first after %d", before, after)
		if after <= before {
			t.Fatalf("fence %d after the restart, %d before", after, before)
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		run(t, m.Addr(), func() {
			m.Close()
			m.FlushAll() // a restart without persistence
			if err := m.Restart(); err != nil {
				t.Fatal(err)
			}
		})
	})
	for _, b := range redistest.Backends(t) {
		if !b.Real() {
			continue
		}
		t.Run("redis", func(t *testing.T) {
			srv, err := redistest.StartVolatile()
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			run(t, srv.Addr, func() {
				if err := srv.Restart(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// childKey rebuilds the key a parent passed on as its String: these tests'
// key parts have no bytes that NewKey escapes.
func childKey(s string) lockcore.Key {
	k, err := lockcore.NewKey(strings.Split(s, ":")...)
	if err != nil {
		panic(err)
	}
	return k
}
