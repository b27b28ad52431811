package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// countingKV counts the transactions sent through it.
type countingKV struct {
	clientv3.KV
	txns atomic.Int64
}

func (c *countingKV) Txn(ctx context.Context) clientv3.Txn {
	c.txns.Add(1)
	return c.KV.Txn(ctx)
}

// countingEngine returns an engine on a client of its own to the server of
// cli, whose transactions kv counts.
func countingEngine(t *testing.T, cli *clientv3.Client, prefix string) (*Engine, *countingKV) {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: cli.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	kv := &countingKV{KV: c.KV}
	c.KV = kv
	e, err := New(c, Options{Prefix: prefix, TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, kv
}

// keys returns n keys of resource "item", sorted as TakeAll wants them.
func keys(t *testing.T, n int) []lockcore.Key {
	t.Helper()
	ks := make([]lockcore.Key, n)
	for i := range ks {
		k, err := lockcore.NewKey("item", fmt.Sprintf("%04d", i))
		if err != nil {
			t.Fatal(err)
		}
		ks[i] = k
	}
	return ks
}

// requests returns the requests of one set for keys, with token tok.
func requests(ks []lockcore.Key, tok string, wait time.Duration) []lockcore.Request {
	rs := make([]lockcore.Request, len(ks))
	for i, k := range ks {
		rs[i] = lockcore.Request{Key: k, Token: tok, Wait: wait}
	}
	return rs
}

// queued returns the create revisions of the queue keys of ks, by key.
func queued(t *testing.T, e *Engine, ks []lockcore.Key) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	for _, k := range ks {
		resp, err := e.cli.Get(context.Background(), e.queue(k.String()), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			out[k.String()] = append(out[k.String()], kv.CreateRevision)
		}
	}
	return out
}

// TestTakeAllOneTransaction: a free set of eight keys is taken in one
// transaction, all its keys created at one revision, which is every
// hold's fence, and given up in one more; through a Locker too.
func TestTakeAllOneTransaction(t *testing.T) {
	cli := startEtcd(t)
	e, kv := countingEngine(t, cli, "batch-one/")
	ks := keys(t, 8)
	before := kv.txns.Load()
	hs, err := e.TakeAll(context.Background(), requests(ks, "set-1", lockcore.FailFast))
	if err != nil || len(hs) != len(ks) {
		t.Fatalf("TakeAll of %d free keys: %d holds, %v", len(ks), len(hs), err)
	}
	if n := kv.txns.Load() - before; n != 1 {
		t.Errorf("TakeAll of %d free keys sent %d transactions, want 1", len(ks), n)
	}
	revs := queued(t, e, ks)
	for _, k := range ks {
		if got := revs[k.String()]; len(got) != 1 || got[0] != hs[0].Fence() {
			t.Errorf("%v: queue keys created at %v, want one, at the set's fence %d", k, got, hs[0].Fence())
		}
	}
	for _, h := range hs {
		if h.Fence() != hs[0].Fence() {
			t.Errorf("fences %d and %d in one set", h.Fence(), hs[0].Fence())
		}
	}
	before = kv.txns.Load()
	for i, err := range e.ReleaseAll(context.Background(), hs) {
		if err != nil {
			t.Errorf("ReleaseAll: hold %d: %v", i, err)
		}
	}
	if n := kv.txns.Load() - before; n != 1 {
		t.Errorf("ReleaseAll of %d holds sent %d transactions, want 1", len(ks), n)
	}
	if revs := queued(t, e, ks); len(revs) != 0 {
		t.Errorf("after ReleaseAll, queue keys remain: %v", revs)
	}

	// Through a Locker: one transaction each way.
	l := lock.FromEngine(e)
	before = kv.txns.Load()
	ls, err := l.AcquireAll(context.Background(), ks[:3], lock.Wait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n := kv.txns.Load() - before; n != 1 {
		t.Errorf("Locker.AcquireAll of 3 free keys sent %d transactions, want 1", n)
	}
	before = kv.txns.Load()
	if err := lifecycle.ReleaseAll(context.Background(), ls); err != nil {
		t.Fatal(err)
	}
	if n := kv.txns.Load() - before; n != 1 {
		t.Errorf("ReleaseAll of 3 leases sent %d transactions, want 1", n)
	}
}

// TestTakeAllWaits: a set one of whose keys is held queues all its keys
// at one revision, in one transaction, and so holds its place on the free
// one (a later fail-fast attempt there fails); it is granted every key at
// once, with one fence above the holder's, when the holder releases.
// Failing fast, it fails with the held key's ContentionError, having
// written nothing; a wait that gives up leaves none of its keys.
func TestTakeAllWaits(t *testing.T) {
	cli := startEtcd(t)
	e, kv := countingEngine(t, cli, "batch-wait/")
	other, err := New(cli, Options{Prefix: "batch-wait/", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ks := keys(t, 3)
	held, err := other.Take(ctx, lockcore.Request{Key: ks[1], Token: "holder", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}

	// Failing fast: the held key's contention, nothing written.
	before := kv.txns.Load()
	_, err = e.TakeAll(ctx, requests(ks, "fast", lockcore.FailFast))
	var ce *lockcore.ContentionError
	if !errors.As(err, &ce) || ce.Key != ks[1].String() || ce.TimedOut {
		t.Fatalf("TakeAll failing fast with %v held: %v, want its ContentionError", ks[1], err)
	}
	if n := kv.txns.Load() - before; n != 1 {
		t.Errorf("a fail-fast TakeAll on a held key sent %d transactions, want 1", n)
	}
	if revs := queued(t, e, ks); len(revs) != 1 || len(revs[ks[1].String()]) != 1 {
		t.Fatalf("after a fail-fast TakeAll: queue keys %v, want the holder's alone", revs)
	}

	// Waiting, then given up: no key left.
	wctx, wcancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := e.TakeAll(wctx, requests(ks, "quitter", 20*time.Second))
		gaveUp <- err
	}()
	waitQueued(t, e, ks, 4) // the holder's and the quitter's three
	wcancel()
	if err := <-gaveUp; !errors.Is(err, lockcore.ErrWaitTimeout) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled TakeAll: %v, want ErrWaitTimeout and context.Canceled", err)
	}
	waitQueued(t, e, ks, 1)

	// Waiting, then granted.
	type result struct {
		hs  []lockcore.Hold
		err error
	}
	got := make(chan result, 1)
	before = kv.txns.Load()
	go func() {
		hs, err := e.TakeAll(ctx, requests(ks, "waiter", 20*time.Second))
		got <- result{hs, err}
	}()
	waitQueued(t, e, ks, 4)
	revs := queued(t, e, ks)
	at := revs[ks[0].String()][0]
	for _, k := range ks {
		q := revs[k.String()]
		if q[len(q)-1] != at {
			t.Fatalf("the waiting set's keys were created at %v, want one revision", revs)
		}
	}
	if h, err := other.Take(ctx, lockcore.Request{Key: ks[0], Token: "late", Wait: lockcore.FailFast}); err == nil {
		_ = h.Release(ctx, nil)
		t.Fatalf("%v was free while a set waited for it and %v: the set did not keep its place", ks[0], ks[1])
	}
	if err := held.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || len(r.hs) != len(ks) {
		t.Fatalf("the waiting set: %d holds, %v", len(r.hs), r.err)
	}
	for _, h := range r.hs {
		if h.Fence() != r.hs[0].Fence() || h.Fence() <= held.Fence() {
			t.Errorf("the set's fence %d (first %d), the holder's %d: want one, above the holder's", h.Fence(), r.hs[0].Fence(), held.Fence())
		}
	}
	// The queue, the grant: two transactions, whatever the number of keys.
	if n := kv.txns.Load() - before; n != 3 {
		t.Errorf("a waiting TakeAll sent %d transactions, want 3 (the attempt, the queue, the grant)", n)
	}
	for _, err := range e.ReleaseAll(ctx, r.hs) {
		if err != nil {
			t.Error(err)
		}
	}
	waitQueued(t, e, ks, 0)
}

// waitQueued waits, for a bounded time, until the queues of ks hold n keys
// in all.
func waitQueued(t *testing.T, e *Engine, ks []lockcore.Key, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := 0
		for _, q := range queued(t, e, ks) {
			got += len(q)
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queues of %v hold %d keys, want %d", ks, got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTakeAllDeclines: a set beyond etcd's default transaction size, a
// set with shared holds, and a set that carries propagated owner tokens
// (here, one holding one of its keys) are declined, with nothing written,
// for the Locker to take one by one; a Locker then takes such sets all
// the same.
func TestTakeAllDeclines(t *testing.T) {
	cli := startEtcd(t)
	e, kv := countingEngine(t, cli, "batch-decline/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := keys(t, maxSet+1)
	before := kv.txns.Load()
	if hs, err := e.TakeAll(ctx, requests(big, "big", lockcore.FailFast)); hs != nil || err != nil {
		t.Fatalf("TakeAll of %d keys: %d holds, %v; want it declined", len(big), len(hs), err)
	}
	if n := kv.txns.Load() - before; n != 0 {
		t.Errorf("a declined TakeAll sent %d transactions", n)
	}
	l := lock.FromEngine(e)
	ls, err := l.AcquireAll(ctx, big, lock.Wait(10*time.Second))
	if err != nil || len(ls) != len(big) {
		t.Fatalf("Locker.AcquireAll of %d keys: %d leases, %v", len(big), len(ls), err)
	}
	if err := lifecycle.ReleaseAll(ctx, ls); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, e, big, 0)
	// The largest set it takes: the withdrawal and the release fit too.
	most := big[:maxSet]
	if hs, err := e.TakeAll(ctx, requests(most, "most", lockcore.FailFast)); err != nil || len(hs) != maxSet {
		t.Fatalf("TakeAll of %d keys: %d holds, %v", maxSet, len(hs), err)
	} else {
		for i, err := range e.ReleaseAll(ctx, hs) {
			if err != nil {
				t.Fatalf("ReleaseAll of %d holds: hold %d: %v", maxSet, i, err)
			}
		}
	}
	waitQueued(t, e, most, 0)

	ks := keys(t, 2)
	shared := requests(ks, "shared", lockcore.FailFast)
	shared[1].Share = -1
	before = kv.txns.Load()
	if hs, err := e.TakeAll(ctx, shared); hs != nil || err != nil {
		t.Fatalf("TakeAll with a reader: %d holds, %v; want it declined", len(hs), err)
	}
	h, err := e.Take(ctx, lockcore.Request{Key: ks[1], Token: "outer", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	rs := requests(ks, "inner", lockcore.FailFast)
	for i := range rs {
		rs[i].Join = []string{"outer"}
	}
	if hs, err := e.TakeAll(ctx, rs); hs != nil || err != nil {
		t.Fatalf("TakeAll of a key the request's token holds: %d holds, %v; want it declined", len(hs), err)
	}
	if n := kv.txns.Load() - before; n != 1 {
		t.Errorf("declining a shared set and one with tokens, and one Take between: %d transactions, want the Take's 1", n)
	}
	if err := h.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, e, ks, 0)
}
