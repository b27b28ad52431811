package etcdengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
)

// newTestEngine returns an Engine on cli with prefix, closed when the test
// ends.
func newTestEngine(t *testing.T, cli *clientv3.Client, prefix string) *Engine {
	t.Helper()
	e, err := New(cli, Options{Prefix: prefix, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// mustKey returns the key of parts, failing the test if it is invalid.
func mustKey(t *testing.T, parts ...string) lockcore.Key {
	t.Helper()
	k, err := lockcore.NewKey(parts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// resultRev returns the revision of the last write of key's result, 0 for
// none.
func resultRev(t *testing.T, e *Engine, key lockcore.Key) int64 {
	t.Helper()
	resp, err := e.cli.Get(context.Background(), e.resultKey(key.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].ModRevision
}

// TestKeepSentAgain: the store of a Keep run a second time for the same
// hold, as after a lost reply, with another result, reports success and
// stores nothing: the result keeps the first store's bytes and revision.
// So for a holder that another hold re-entered by its token, whose lock
// stays held until that re-entry lets go; and a plain acquisition takes
// the key once it is free, the result still there.
func TestKeepSentAgain(t *testing.T) {
	cli := startEtcd(t)
	e := newTestEngine(t, cli, "again/")
	ctx := t.Context()
	for _, reentered := range []bool{false, true} {
		t.Run(fmt.Sprintf("reentered=%v", reentered), func(t *testing.T) {
			k := mustKey(t, "pay", fmt.Sprint(reentered))
			h, err := e.Take(ctx, lockcore.Request{Key: k, Token: "holder-" + fmt.Sprint(reentered), Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			var inner lockcore.Hold
			if reentered {
				inner, err = e.Take(ctx, lockcore.Request{Key: k, Token: "inner", Join: []string{h.Token()}, Wait: lockcore.FailFast})
				if err != nil {
					t.Fatalf("re-entry by token: %v", err)
				}
			}
			first := &keeping{h: h.(*hold), res: []byte("first\n\x00"), keep: time.Minute}
			if err := first.step(ctx); err != nil {
				t.Fatalf("the store: %v", err)
			}
			rev := resultRev(t, e, k)
			again := &keeping{h: h.(*hold), res: []byte("sent again"), keep: time.Minute}
			if err := again.step(ctx); err != nil {
				t.Fatalf("the same store sent again: %v, want success", err)
			}
			if got := resultRev(t, e, k); got != rev {
				t.Fatalf("the result was written again at revision %d (first at %d)", got, rev)
			}
			if res, ok, err := e.Result(ctx, k); err != nil || !ok || !bytes.Equal(res, []byte("first\n\x00")) {
				t.Fatalf("Result: %q, %v, %v; want the first store's", res, ok, err)
			}
			other := lockcore.Request{Key: k, Token: "other", Wait: lockcore.FailFast}
			if reentered {
				if h2, err := e.Take(ctx, other); !errors.As(err, new(*lockcore.ContentionError)) {
					if h2 != nil {
						_ = h2.Release(ctx, nil)
					}
					t.Fatalf("a plain Take while the re-entry holds the kept hold's lock: %v, want a *ContentionError", err)
				}
				if err := inner.Release(ctx, nil); err != nil {
					t.Fatalf("the re-entry's Release: %v", err)
				}
			}
			h2, err := e.Take(ctx, other)
			if err != nil {
				t.Fatalf("a plain Take after the Keep: %v, want the key free", err)
			}
			if err := h2.Release(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if got := resultRev(t, e, k); got != rev {
				t.Fatalf("the result was written again at revision %d (first at %d)", got, rev)
			}
		})
	}
}

// TestResultOutlivesEngine: a result kept by an Engine that then closed
// (revoking its sessions' leases), its client closed too, is read by a
// fresh Engine on a fresh client: Result, StoredResults, and a Take that
// wants it.
func TestResultOutlivesEngine(t *testing.T) {
	endpoint, stop, err := startEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	dial := func() *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		return cli
	}
	ctx := t.Context()
	k := mustKey(t, "order", "7")
	res := []byte("201 created\n\x00\xff")

	cli := dial()
	e, err := New(cli, Options{Prefix: "outlive/", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.Take(ctx, lockcore.Request{Key: k, Token: "first", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Keep(ctx, k, h, res, time.Hour); err != nil {
		t.Fatalf("Keep: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}

	cli = dial()
	t.Cleanup(func() { _ = cli.Close() })
	fresh := newTestEngine(t, cli, "outlive/")
	if got, ok, err := fresh.Result(ctx, k); err != nil || !ok || !bytes.Equal(got, res) {
		t.Fatalf("a fresh Engine's Result: %q, %v, %v; want %q", got, ok, err, res)
	}
	list, more, err := fresh.StoredResults(ctx, "", 10)
	if err != nil || more || len(list) != 1 || list[0].Key != k || list[0].Size < int64(len(res)) ||
		list[0].Expires.Before(time.Now().Add(59*time.Minute)) || list[0].Expires.After(time.Now().Add(time.Hour+time.Second)) {
		t.Fatalf("a fresh Engine's StoredResults: %+v, more %v, %v; want %v kept an hour", list, more, err, k)
	}
	if all, more, err := fresh.StoredResults(ctx, "", math.MaxInt); err != nil || more || len(all) != 1 {
		t.Fatalf("StoredResults without a limit: %+v, more %v, %v; want the one result", all, more, err)
	}
	h, err = fresh.Take(ctx, lockcore.Request{Key: k, Token: "retry", Wait: time.Second, Result: true})
	if found, ok := errors.AsType[*lockcore.ResultFound](err); h != nil || !ok || !bytes.Equal(found.Result, res) {
		t.Fatalf("a fresh Engine's Take that wants the result: hold %v, %v; want a *ResultFound with it", h != nil, err)
	}
}

// TestResultReachesWaiterBehindPlain: a waiter that wants the result,
// queued behind a plain waiter, which is behind the holder, gets the
// result the holder keeps while the plain waiter, granted the lock by
// that release, still holds it: it learns of the result from the result's
// key, not only at its turn. Its key leaves the queue.
func TestResultReachesWaiterBehindPlain(t *testing.T) {
	cli := startEtcd(t)
	ea, eb := newTestEngine(t, cli, "behind/"), newTestEngine(t, cli, "behind/")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	k := mustKey(t, "pay", "behind")
	holder, err := ea.Take(ctx, lockcore.Request{Key: k, Token: "holder", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		h   lockcore.Hold
		err error
	}
	plain, wants := make(chan got, 1), make(chan got, 1)
	go func() {
		h, err := eb.Take(ctx, lockcore.Request{Key: k, Token: "plain", Wait: 20 * time.Second})
		plain <- got{h, err}
	}()
	queued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; {
			info, err := ea.Inspect(ctx, k)
			if err == nil && len(info.Waiters) == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters not queued within 5s: %+v, %v", n, info, err)
			}
			time.Sleep(10 * time.Millisecond) // polling, bounded above
		}
	}
	queued(1)
	go func() {
		h, err := ea.Take(ctx, lockcore.Request{Key: k, Token: "wants", Wait: 20 * time.Second, Result: true})
		wants <- got{h, err}
	}()
	queued(2)
	res := []byte("kept")
	if err := ea.Keep(ctx, k, holder, res, time.Minute); err != nil {
		t.Fatalf("Keep: %v", err)
	}
	p := <-plain
	if p.err != nil {
		t.Fatalf("the plain waiter: %v, want the lock", p.err)
	}
	select {
	case w := <-wants:
		found, ok := errors.AsType[*lockcore.ResultFound](w.err)
		if w.h != nil || !ok || !bytes.Equal(found.Result, res) {
			t.Fatalf("the waiter that wants the result: hold %v, %v; want a *ResultFound with it", w.h != nil, w.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter that wants the result did not get it within 10s while the plain waiter held the lock")
	}
	if err := p.h.Err(); err != nil {
		t.Fatalf("the plain waiter's hold: %v", err)
	}
	if info, err := ea.Inspect(ctx, k); err != nil || len(info.Waiters) != 0 || len(info.Holders) != 1 {
		t.Fatalf("after the result was found: %+v, %v; want the plain holder alone", info, err)
	}
	if err := p.h.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// TestIdempotentRoute: a route built with Locker.Idempotent on two
// Lockers of this engine (two processes), one etcd: 8 duplicates of one
// Idempotency-Key sent at once, half to each, and then a retry, run the
// handler once; every response carries its body, and all but the one
// that ran are replays.
func TestIdempotentRoute(t *testing.T) {
	cli := startEtcd(t)
	var runs atomic.Int64
	pay := func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "payment %d", n)
	}
	var urls []string
	for range 2 {
		l := lock.FromEngine(newTestEngine(t, cli, "idem/"))
		t.Cleanup(func() { _ = l.Close() })
		r := chi.NewRouter()
		r.With(l.Idempotent(lock.Wait(20*time.Second))).Post("/payments", pay)
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	send := func(url string) (int, string, string, error) {
		req, err := http.NewRequestWithContext(t.Context(), "POST", url+"/payments", strings.NewReader(`{"amount":5}`))
		if err != nil {
			return 0, "", "", err
		}
		req.Header.Set("Idempotency-Key", `"5f0c1a52-5d0e-4a52-9d7a-1f4f6f0f6a10"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header.Get("Idempotent-Replayed"), err
	}
	const dups = 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		replayed int
	)
	for i := range dups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body, replay, err := send(urls[i%2])
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("duplicate %d: %v", i, err)
			case code != http.StatusCreated || body != "payment 1":
				t.Errorf("duplicate %d: %d %q, want 201 %q", i, code, body, "payment 1")
			case replay == "true":
				replayed++
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if n := runs.Load(); n != 1 || replayed != dups-1 {
		t.Fatalf("%d duplicates: the handler ran %d times and %d responses were replays; want 1 and %d", dups, n, replayed, dups-1)
	}
	code, body, replay, err := send(urls[1])
	if err != nil || code != http.StatusCreated || body != "payment 1" || replay != "true" || runs.Load() != 1 {
		t.Fatalf("the retry: %d %q replayed=%q, %v, %d runs; want a replay of the one run", code, body, replay, err, runs.Load())
	}
}
