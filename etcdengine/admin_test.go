package etcdengine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/lockcore"
)

// TestAdminOnEtcd: the admin handler, over real HTTP, lists and inspects a
// lock held on etcd and force-releases it; the holder's context then ends
// with ErrRevoked, and the lock's audit record keeps the reason.
func TestAdminOnEtcd(t *testing.T) {
	cli := startEtcd(t)
	e, err := New(cli, Options{Prefix: "admin/", Name: "pod-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	locker := lock.FromEngine(e)
	srv := httptest.NewServer(http.StripPrefix("/admin", admin.Handler(locker.Operator(), admin.Config{})))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key, _ := lockcore.NewKey("productID", "42")
	ls, err := locker.Acquire(ctx, key, lock.Policy{Wait: lockcore.FailFast, Route: "POST /products/{productID}/buy"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ls.Release(ctx) }()

	get := func(path string, into any) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/admin" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	type holder struct {
		Instances []string `json:"instances"`
		Names     []string `json:"names"`
		Route     string   `json:"route"`
		Fence     int64    `json:"fence"`
	}
	type lockJSON struct {
		Key     string   `json:"key"`
		Holders []holder `json:"holders"`
		Audit   []struct {
			Reason string `json:"reason"`
		} `json:"audit"`
	}
	var list struct {
		Locks []lockJSON `json:"locks"`
	}
	get("/locks?prefix=productID:", &list)
	if len(list.Locks) != 1 || list.Locks[0].Key != "productID:42" || len(list.Locks[0].Holders) != 1 {
		t.Fatalf("the list: %+v", list)
	}
	var one lockJSON
	get("/locks/"+url.PathEscape("productID:42"), &one)
	if len(one.Holders) != 1 || one.Holders[0].Fence != ls.Fence() || one.Holders[0].Route != "POST /products/{productID}/buy" ||
		len(one.Holders[0].Instances) != 1 || len(one.Holders[0].Names) != 1 || one.Holders[0].Names[0] != "pod-a" {
		t.Fatalf("the lock: %+v, want the holder with fence %d, its route and instance", one, ls.Fence())
	}

	resp, err := http.Post(srv.URL+"/admin/locks/"+url.PathEscape("productID:42")+"/release", "application/json", strings.NewReader(`{"reason":"stuck checkout"}`))
	if err != nil {
		t.Fatal(err)
	}
	var rev struct {
		Fence    int64 `json:"fence"`
		NewFence int64 `json:"new_fence"`
	}
	err = json.NewDecoder(resp.Body).Decode(&rev)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || rev.Fence != ls.Fence() {
		t.Fatalf("the release: %d, %+v, %v; want 200 and the hold's fence %d", resp.StatusCode, rev, err, ls.Fence())
	}
	select {
	case <-ls.Context().Done():
		if cause := context.Cause(ls.Context()); !errors.Is(cause, lockcore.ErrRevoked) {
			t.Errorf("the holder's context ended with %v, want ErrRevoked", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's context did not end after the release")
	}
	get("/locks/"+url.PathEscape("productID:42"), &one)
	if len(one.Holders) != 0 || len(one.Audit) != 1 || one.Audit[0].Reason != "stuck checkout" {
		t.Errorf("after the release: %+v, want free, with the reason in its audit", one)
	}
	resp, err = http.Post(srv.URL+"/admin/locks/"+url.PathEscape("productID:42")+"/release", "application/json", strings.NewReader(`{"reason":"again"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a release of a free lock: %d, want 404", resp.StatusCode)
	}
}
