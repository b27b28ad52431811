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
	direct, cli, p := behindProxy(t)
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
	ea.abandon(cur, mine, false)
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

// TestTakeBoundedWhenEtcdIsSilent: with etcd not answering (every packet
// dropped, connections kept open: a partition), an acquisition that
// waits returns within its Wait and Options.Timeout more, and one that
// fails fast within Options.Timeout, ErrUnavailable or busy; neither
// waits for the caller's context, and neither holds anything.
func TestTakeBoundedWhenEtcdIsSilent(t *testing.T) {
	direct, cli, p := behindProxy(t)
	const timeout, wait, slack = 500 * time.Millisecond, 2 * time.Second, 400 * time.Millisecond
	ea, err := New(cli, Options{Prefix: "silent/", TTL: 5 * time.Second, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	eb, err := New(direct, Options{Prefix: "silent/", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ea.Close(); _ = eb.Close() })
	ctx := context.Background()
	k, _ := lockcore.NewKey("productID", "12")
	// ea's session is granted while etcd answers.
	h, err := ea.Take(ctx, lockcore.Request{Key: k, Token: "warm", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
	held, err := eb.Take(ctx, lockcore.Request{Key: k, Token: "holder", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx, nil)

	// Silent once the acquisition waits in line: it waits out its Wait.
	type taken struct {
		h   lockcore.Hold
		err error
	}
	done := make(chan taken, 1)
	start := time.Now()
	go func() {
		h, err := ea.Take(ctx, lockcore.Request{Key: k, Token: "in-line", Wait: wait})
		done <- taken{h, err}
	}()
	for queued := false; !queued; {
		resp, err := direct.Get(ctx, ea.queue(k.String()), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		queued = resp.Count == 2
		if !queued && time.Since(start) > wait {
			t.Fatal("the acquisition never queued")
		}
	}
	p.Blackhole(true)
	defer p.Blackhole(false)
	select {
	case got := <-done:
		took := time.Since(start)
		t.Logf("in line, etcd silent: %v after %v", got.err, took.Round(time.Millisecond))
		if got.h != nil || !errors.Is(got.err, lockcore.ErrNotAcquired) && !errors.Is(got.err, lockcore.ErrUnavailable) {
			t.Errorf("in line, etcd silent: %v, %v; want busy or ErrUnavailable", got.h, got.err)
		}
		if took > wait+timeout+slack {
			t.Errorf("in line, etcd silent: returned after %v, want within %v", took, wait+timeout+slack)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("in line, etcd silent: no answer within 30s")
	}

	for _, c := range []struct {
		name  string
		wait  time.Duration
		bound time.Duration
	}{{"fail-fast", lockcore.FailFast, timeout + slack}, {"waiting", wait, wait + timeout + slack}} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		start := time.Now()
		h, err := ea.Take(cctx, lockcore.Request{Key: k, Token: "silent-" + c.name, Wait: c.wait})
		took := time.Since(start)
		cancel()
		t.Logf("%s, etcd silent: %v after %v", c.name, err, took.Round(time.Millisecond))
		if h != nil {
			t.Fatalf("%s, etcd silent: took a held key", c.name)
		}
		if !errors.Is(err, lockcore.ErrUnavailable) && !errors.Is(err, lockcore.ErrNotAcquired) {
			t.Errorf("%s, etcd silent: %v; want ErrUnavailable or busy", c.name, err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Errorf("%s, etcd silent: %v; the caller's context did not end", c.name, err)
		}
		if took > c.bound {
			t.Errorf("%s, etcd silent: returned after %v, want within %v", c.name, took, c.bound)
		}
	}
}

// behindProxy starts an etcd server and returns a client of it, one that
// reaches it through a fault proxy, and the proxy.
func behindProxy(t *testing.T) (direct, proxied *clientv3.Client, p *faultproxy.Proxy) {
	t.Helper()
	direct = startEtcd(t)
	p = faultproxy.Start(t, strings.TrimPrefix(direct.Endpoints()[0], "http://"))
	proxied, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + p.Addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxied.Close() })
	return direct, proxied, p
}

// TestWithdrawalOutlastsSilence: the keys of a set's wait that gave up
// are deleted once etcd answers again, however long it was silent (here
// 8 × Options.Timeout), while the session they are on lives: until then
// they would block their locks' lines for no one. A withdrawal after a
// call etcd did not answer returns at once, leaving the deletion to the
// background, rather than ask the same silent etcd once more while the
// caller waits; any other returns within Options.Timeout.
func TestWithdrawalOutlastsSilence(t *testing.T) {
	direct, cli, p := behindProxy(t)
	const timeout, silence, slack = 200 * time.Millisecond, 8 * 200 * time.Millisecond, 100 * time.Millisecond
	e, err := New(cli, Options{Prefix: "withdraw/", TTL: time.Minute, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := e.session(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer s.unref()
	for _, later := range []bool{true, false} {
		name := map[bool]string{true: "later", false: "at-once"}[later]
		var mines []string
		var puts []clientv3.Op
		for _, id := range []string{"a", "b"} {
			k, _ := lockcore.NewKey("productID", name+"-"+id)
			mine := e.queue(k.String()) + "token"
			mines = append(mines, mine)
			puts = append(puts, clientv3.OpPut(mine, "", clientv3.WithLease(s.id)))
		}
		resp, err := direct.Txn(ctx).Then(puts...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		p.Blackhole(true)
		start := time.Now()
		e.withdrawAll([]*session{s, s}, mines, resp.Header.Revision, later)
		took := time.Since(start)
		bound := slack
		if !later {
			bound = timeout + slack
		}
		if took > bound {
			t.Errorf("%s: the withdrawal returned after %v with etcd silent, want within %v", name, took, bound)
		}
		hold := time.NewTimer(silence - took) // the partition's length
		select {
		case <-hold.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		// The partition heals; the connections it broke are reset, as
		// their peers' would be, and the client dials again.
		p.Blackhole(false)
		p.ResetAll()
		healed := time.Now()
		for left := int64(-1); left != 0; {
			r, err := direct.Get(ctx, e.opt.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			// Only the session's keys are under the prefix.
			left = r.Count
			if left != 0 && time.Since(healed) > 10*time.Second {
				t.Fatalf("%s: %d keys of a withdrawn wait left 10s after a silence of %v ended", name, left, silence)
			}
			pause := time.NewTimer(20 * time.Millisecond) // bounded polling
			select {
			case <-pause.C:
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
		t.Logf("%s: withdrawal returned after %v; the keys went %v after etcd answered again", name, took.Round(time.Millisecond), time.Since(healed).Round(time.Millisecond))
	}
}
