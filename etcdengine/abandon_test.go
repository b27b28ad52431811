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
