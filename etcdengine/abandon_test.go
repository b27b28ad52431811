package etcdengine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/lockcore"
)

// TestUnansweredTakeLeavesNoKey: an acquisition that etcd wrote but whose
// answer was lost (the connection broke after the request went out)
// fails, and leaves the lock free: no key of it stays behind on its
// session, which the engine goes on renewing for as long as it runs, so
// that the lock would be held by no one until the process exits.
func TestUnansweredTakeLeavesNoKey(t *testing.T) {
	direct := startEtcd(t)
	endpoint := direct.Endpoints()[0]
	p := faultproxy.Start(t, strings.TrimPrefix(endpoint, "http://"))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + p.Addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ea, err := New(cli, Options{Prefix: "unanswered/", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eb, err := New(direct, Options{Prefix: "unanswered/", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ea.Close(); _ = eb.Close() })
	a, b := lock.FromEngine(ea), lock.FromEngine(eb)
	k, _ := lockcore.NewKey("productID", "11")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.LoseReplyTo([]byte(ea.queue(k.String())), 1)
	if ls, err := a.Acquire(ctx, k, lock.FailFast()); !errors.Is(err, lockcore.ErrUnavailable) {
		if err == nil {
			_ = ls.Release(ctx)
		}
		t.Fatalf("an acquisition whose answer was lost: %v, want ErrUnavailable", err)
	}
	if n := p.LostReplies(); n != 1 {
		t.Fatalf("%d replies lost, want 1", n)
	}
	// The engine that wrote the key renews its session meanwhile: a key
	// left behind would hold the lock for as long as it runs.
	deadline := time.Now().Add(3 * 2 * time.Second)
	for {
		ls, err := b.Acquire(ctx, k, lock.FailFast())
		if err == nil {
			_ = ls.Release(ctx)
			return
		}
		if !errors.Is(err, lockcore.ErrNotAcquired) || time.Now().After(deadline) {
			t.Fatalf("the lock after an acquisition whose answer was lost, three TTLs on: %v, want it free", err)
		}
		pause := time.NewTimer(50 * time.Millisecond) // bounded polling
		select {
		case <-pause.C:
		case <-ctx.Done():
		}
	}
}

// TestLateWriteLeavesNoKey: a write whose answer never came may be applied
// by etcd after the engine looked for it (a request that timed out while
// the leader changed, committed by the next leader). The engine retires
// the session it was written on: a key that lands on it after the
// clean-up is gone once the session's last hold is released, rather than
// holding the lock for no one while the engine runs; new acquisitions
// take a new session meanwhile.
func TestLateWriteLeavesNoKey(t *testing.T) {
	cli := startEtcd(t)
	const ttl = 2 * time.Second
	ea, err := New(cli, Options{Prefix: "late/", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	eb, err := New(cli, Options{Prefix: "late/", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ea.Close(); _ = eb.Close() })
	a, b := lock.FromEngine(ea), lock.FromEngine(eb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, _ := lockcore.NewKey("productID", "1")
	late, _ := lockcore.NewKey("productID", "2")
	ls, err := a.Acquire(ctx, held, lock.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	ea.mu.Lock()
	var cur *session
	for _, v := range ea.sessions {
		cur = v
	}
	ea.mu.Unlock()
	if cur == nil {
		t.Fatal("no session after an acquisition")
	}
	// An acquisition of late whose answer never came: abandoned, then
	// applied after the clean-up.
	mine := ea.queue(late.String()) + "lost-token"
	cur.ref()
	ea.abandon(cur, mine)
	if _, err := cli.Put(ctx, mine, "", clientv3.WithLease(cur.id)); err != nil {
		t.Fatal(err)
	}
	cur.unref()
	if _, err := b.Acquire(ctx, late, lock.FailFast()); !errors.Is(err, lockcore.ErrNotAcquired) {
		t.Fatalf("the late key does not hold the lock while its session lives: %v", err)
	}
	// New acquisitions take another session.
	other, _ := lockcore.NewKey("productID", "3")
	ls3, err := a.Acquire(ctx, other, lock.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	ea.mu.Lock()
	var next *session
	for _, v := range ea.sessions {
		next = v
	}
	ea.mu.Unlock()
	if next == nil || next == cur || next.id == cur.id {
		t.Fatal("an acquisition after a session was retired took it again")
	}
	if err := ls3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The retired session's last hold is released: its lease goes, and
	// the late key with it.
	deadline := time.Now().Add(3 * ttl)
	for {
		lb, err := b.Acquire(ctx, late, lock.FailFast())
		if err == nil {
			_ = lb.Release(ctx)
			return
		}
		if !errors.Is(err, lockcore.ErrNotAcquired) || time.Now().After(deadline) {
			t.Fatalf("the lock under a late write, three TTLs after its session's last hold: %v, want it free", err)
		}
		pause := time.NewTimer(50 * time.Millisecond) // bounded polling
		select {
		case <-pause.C:
		case <-ctx.Done():
		}
	}
}
