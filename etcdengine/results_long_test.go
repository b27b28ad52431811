//go:build long

package etcdengine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/routelock/lock/lockcore"
)

// TestKeepUnanswered: a Keep that etcd does not answer (its client cut off
// by a proxy) fails with ErrUnavailable within the engine's Timeout and
// goes on in the background: once the link heals, the result lands and
// frees the lock, and a waiter in line on another Engine (its own client,
// never cut) that wants the result gets it, not the lock. 5 rounds.
func TestKeepUnanswered(t *testing.T) {
	endpoint, stop, err := startEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	p := newLinkProxy(t)
	p.setTarget(strings.TrimPrefix(endpoint, "http://"))
	dial := func(ep string) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	cut, err := New(dial("http://"+p.addr), Options{Prefix: "unanswered/", TTL: 5 * time.Second, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cut.Close() })
	other := newTestEngine(t, dial(endpoint), "unanswered/")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for round := range 5 {
		k := mustKey(t, "pay", string(rune('a'+round)))
		h, err := cut.Take(ctx, lockcore.Request{Key: k, Token: "holder", Wait: lockcore.FailFast})
		if err != nil {
			t.Fatalf("round %d: Take: %v", round, err)
		}
		type got struct {
			h   lockcore.Hold
			err error
		}
		waiter := make(chan got, 1)
		go func() {
			h, err := other.Take(ctx, lockcore.Request{Key: k, Token: "duplicate", Wait: 30 * time.Second, Result: true})
			waiter <- got{h, err}
		}()
		for deadline := time.Now().Add(5 * time.Second); ; {
			info, err := other.Inspect(ctx, k)
			if err == nil && len(info.Waiters) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the waiter not queued within 5s: %+v, %v", round, info, err)
			}
			time.Sleep(10 * time.Millisecond) // polling, bounded above
		}
		res := []byte("kept in round " + string(rune('a'+round)))
		p.cut(true)
		sent := time.Now()
		err = cut.Keep(ctx, k, h, res, time.Minute)
		took := time.Since(sent)
		p.cut(false)
		if !errors.Is(err, lockcore.ErrUnavailable) || took > 2*time.Second {
			t.Fatalf("round %d: Keep with its client cut off: %v after %v, want ErrUnavailable within the Timeout", round, err, took)
		}
		select {
		case g := <-waiter:
			found, ok := errors.AsType[*lockcore.ResultFound](g.err)
			if g.h != nil {
				_ = g.h.Release(ctx, nil)
			}
			if g.h != nil || !ok || !bytes.Equal(found.Result, res) {
				t.Fatalf("round %d: the waiter that wants the result: hold %v, %v; want a *ResultFound with it", round, g.h != nil, g.err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: the Keep sent again did not land within 20s of the link's healing", round)
		}
		plain, err := other.Take(ctx, lockcore.Request{Key: k, Token: "later", Wait: 5 * time.Second})
		if err != nil {
			t.Fatalf("round %d: a plain Take after the Keep landed: %v, want the key", round, err)
		}
		_ = plain.Release(ctx, nil)
	}
}
