package quorumengine

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/lockcore"
)

// TestAdmin: package admin, over the engine's Operator, lists a lock that
// a quorum holds, with its fence and instance name and without its token,
// and force-releases it: its holder's context ends with ErrRevoked, and
// the key's next hold has a greater fence.
func TestAdmin(t *testing.T) {
	cs := masters(t, 3)
	e := newEngine(t, cs, Options{Prefix: "admin:", TTL: time.Second, Name: "shop-1"})
	locker := lock.FromEngine(e)
	srv := httptest.NewServer(admin.Handler(e, admin.Config{}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, _ := lockcore.NewKey("productID", "42")
	held, err := locker.Acquire(ctx, k, lock.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(srv.URL + "/locks?prefix=productID:")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Locks []struct {
			Key     string `json:"key"`
			Held    bool   `json:"held"`
			Fence   int64  `json:"fence"`
			Holders []struct {
				Names []string `json:"names"`
			} `json:"holders"`
		} `json:"locks"`
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	body := string(raw)
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(list.Locks) != 1 || list.Locks[0].Key != "productID:42" || !list.Locks[0].Held || list.Locks[0].Fence != held.Fence() ||
		len(list.Locks[0].Holders) != 1 || len(list.Locks[0].Holders[0].Names) != 1 || list.Locks[0].Holders[0].Names[0] != "shop-1" {
		t.Fatalf("GET /locks: %s; want productID:42 held by shop-1 with fence %d", body, held.Fence())
	}
	if strings.Contains(body, held.Token()) {
		t.Fatal("GET /locks shows the owner token")
	}
	resp, err = http.Post(srv.URL+"/locks/productID:42/release", "application/json", strings.NewReader(`{"reason":"stuck"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("release: %d, want 200", resp.StatusCode)
	}
	select {
	case <-held.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked holder's context was not cancelled")
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, lockcore.ErrRevoked) {
		t.Fatalf("the revoked holder's cause: %v, want ErrRevoked", cause)
	}
	_ = held.Release(ctx)
	next, err := locker.Acquire(ctx, k, lock.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Fence() <= held.Fence() {
		t.Fatalf("fence %d after the revoked %d", next.Fence(), held.Fence())
	}
}
