package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/lockcore"
)

// The page and the JSON API on a chi router, behind the application's own
// authentication (here Basic auth for one operator), force-releasing a
// lock that a request holds.
func Example() {
	mr, err := miniredis.Run() // any Redis; embedded here
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	ctx := context.Background()
	opsPassword := "correct horse battery staple" // from your secrets, not the source

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	r := chi.NewRouter()
	r.Group(func(r chi.Router) {
		// The handler authenticates nobody: only operators get in.
		r.Use(middleware.BasicAuth("locks", map[string]string{"ops": opsPassword}))
		r.Mount("/admin", admin.Handler(locker.Operator(), admin.Config{Logger: slog.Default()}))
	})
	srv := httptest.NewServer(r) // the page is at /admin/
	defer srv.Close()

	// A request holds productID:42 (taken here with the engine itself).
	key, _ := lockcore.NewKey("productID", "42")
	lease, err := locker.Acquire(ctx, key, lock.FailFast())
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)

	call := func(method, path, body string, v any) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.SetBasicAuth("ops", opsPassword)
		req.Header.Set("Content-Type", "application/json")
		res, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		fmt.Print(method, " ", path, ": ", res.Status, "\n")
		_ = json.NewDecoder(res.Body).Decode(v)
	}
	// The JSON, decoded into the client's own types (see the package
	// documentation for every field).
	var list struct {
		Locks []struct {
			Key     string `json:"key"`
			Held    bool   `json:"held"`
			Waiters []any  `json:"waiters"`
		} `json:"locks"`
	}
	call("GET", "/admin/locks?prefix=productID:", "", &list)
	for _, l := range list.Locks {
		fmt.Println(l.Key, "held:", l.Held, "waiters:", len(l.Waiters))
	}
	var rev struct {
		Reason   string `json:"reason"`
		Fence    int64  `json:"fence"`
		NewFence int64  `json:"new_fence"`
	}
	call("POST", "/admin/locks/productID:42/release", `{"reason": "stuck since the 14:02 deploy"}`, &rev)
	fmt.Println("reason:", rev.Reason, "| fence moved on:", rev.NewFence > rev.Fence)

	select { // the holder's context ends, with the cause ErrRevoked
	case <-lease.Context().Done():
		fmt.Println(context.Cause(lease.Context()))
	case <-time.After(10 * time.Second):
		fmt.Println("the holder was not told")
	}

	res, err := http.Get(srv.URL + "/admin/")
	if err != nil {
		panic(err)
	}
	res.Body.Close()
	fmt.Println("without credentials:", res.Status)
	// Output:
	// GET /admin/locks?prefix=productID:: 200 OK
	// productID:42 held: true waiters: 0
	// POST /admin/locks/productID:42/release: 200 OK
	// reason: stuck since the 14:02 deploy | fence moved on: true
	// routelock: lease revoked by an operator
	// without credentials: 401 Unauthorized
}
