// Command demo serves the admin page on an embedded Redis with a few held
// and awaited locks, for a look at it in a browser, and takes the README's
// screenshot of it with headless Chromium; the routelock command works on
// its Redis too:
//
//	go run ./admin/internal/demo                          # serves until interrupted
//	go run ./admin/internal/demo -shot docs/admin.png     # writes the screenshot and exits
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock"
	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/internal/idem"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

func main() {
	shot := flag.String("shot", "", "write a screenshot of the page to this PNG file with headless Chromium, and exit")
	size := flag.String("size", "1320,760", "the screenshot's window size")
	chromium := flag.String("chromium", "chromium", "the Chromium binary")
	flag.Parse()
	if err := run(*shot, *size, *chromium); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(shot, size, chromium string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return err
	}
	defer mr.Close()
	mr.ClockTTL(true)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()

	// Three instances of an app (pods), each with its engine, and one for
	// the page.
	var engines []*redisengine.Engine
	for _, name := range []string{"shop-7f9c-a", "shop-7f9c-b", "shop-7f9c-c", "ops"} {
		e, err := redisengine.New(rdb, redisengine.Options{Name: name})
		if err != nil {
			return err
		}
		defer e.Close()
		engines = append(engines, e)
	}
	a, b, c, ops := engines[0], engines[1], engines[2], engines[3]
	if err := populate(ctx, a, b, c, ops); err != nil {
		return err
	}

	r := chi.NewRouter()
	r.Mount("/admin", admin.Handler(ops, admin.Config{Title: "Locks · shop"}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	defer srv.Close()
	url := "http://" + l.Addr().String() + "/admin/"
	if shot == "" {
		fmt.Println("serving", url, "(interrupt to stop)")
		fmt.Printf("the CLI: REDIS_URL=redis://%s/0 go run ./cmd/routelock ls\n", mr.Addr())
		<-ctx.Done()
		return nil
	}
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--screenshot="+shot, "--window-size="+size, url)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", chromium, err, out)
	}
	fmt.Println("wrote", shot)
	return nil
}

// populate takes the locks the page shows: a product held with two
// waiters, an order force-released once and held again, a user held by two
// instances (a nested call that re-entered with the owner token), and a
// cart held with one waiter; each through a route or gRPC method, with a
// trace id.
func populate(ctx context.Context, a, b, c, ops *redisengine.Engine) error {
	key := func(parts ...string) lockcore.Key {
		k, err := lockcore.NewKey(parts...)
		if err != nil {
			panic(err)
		}
		return k
	}
	hold := func(e *redisengine.Engine, ctx context.Context, k lockcore.Key, route, trace string) (*lock.Lease, error) {
		return lock.FromEngine(e).Acquire(ctx, k, lock.Policy{Wait: lockcore.FailFast, TTL: 10 * time.Second, Route: route, Trace: trace})
	}
	wait := func(e *redisengine.Engine, k lockcore.Key, d time.Duration, route, trace string) {
		go lock.FromEngine(e).Acquire(ctx, k, lock.Policy{Wait: d, TTL: 10 * time.Second, Route: route, Trace: trace})
	}

	order := key("orderID", "A-10234")
	if _, err := hold(c, ctx, order, "/orders/{orderID}/pay", "5b8aa5a2d2c872e8321cf37308d69df2"); err != nil {
		return err
	}
	if _, err := ops.Revoke(ctx, order, "payment provider timed out; holder stuck since 14:02"); err != nil {
		return err
	}
	if _, err := hold(b, ctx, order, "/orders/{orderID}/pay", "9d2c1e7a40f35b6c8e01a7f4b3d95c20"); err != nil {
		return err
	}

	product := key("productID", "42")
	if _, err := hold(a, ctx, product, "/products/{productID}/buy", "4bf92f3577b34da6a3ce929d0e0e4736"); err != nil {
		return err
	}
	wait(b, product, 45*time.Second, "/products/{productID}/buy", "0af7651916cd43dd8448eb211c80319c")
	wait(c, product, 30*time.Second, "/shop.Inventory/Reserve", "e3b0c44298fc1c149afbf4c8996fb924")

	user := key("userID", "7")
	outer, err := hold(a, ctx, user, "/users/{userID}/checkout", "a3ce929d0e0e47364bf92f3577b34da6")
	if err != nil {
		return err
	}
	propagated, err := lifecycle.Intake(ctx, "token", []string{outer.Token()}, nil)
	if err != nil {
		return err
	}
	if _, err := hold(c, propagated, user, "/shop.Orders/Create", "a3ce929d0e0e47364bf92f3577b34da6"); err != nil {
		return err
	}

	cart := key("cartID", "c9f2")
	if _, err := hold(c, ctx, cart, "/carts/{cartID}/items", "c0ffee5577b34da6a3ce929d0e0e4736"); err != nil {
		return err
	}
	wait(a, cart, 30*time.Second, "/carts/{cartID}/checkout", "7d1e2f0b9a4c4b6e8f3a2d1c0b9e8f7a")

	// Two responses stored for idempotency keys, as the middleware stores
	// them (Locker.Idempotent): the stored results the page links.
	for i, ik := range []string{"a3f1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d", "0b1c2d3e-4f5a-4b6c-9d8e-7f6a5b4c3d2e"} {
		k, err := idem.LockKey([]string{"POST", "/payments"}, "", ik)
		if err != nil {
			return err
		}
		ls, err := lifecycle.Serve(b, nil).Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 10 * time.Second})
		if err != nil {
			return err
		}
		rec := idem.Record{Status: 201, Fields: [][2]string{{"Content-Type", "application/json"}}, Body: []byte(`{"payment":"p_` + strconv.Itoa(1000+i) + `"}`)}
		if err := lifecycle.Keep(ctx, ls, rec.Encode(), time.Duration(24-3*i)*time.Hour); err != nil {
			return err
		}
	}

	// Until the page shows every waiter, and the engines' records name
	// the route of each holder and waiter.
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, known := 0, true
		locks, _, err := ops.List(ctx, "", 0)
		if err != nil {
			return err
		}
		for _, in := range locks {
			n += len(in.Waiters)
			for _, h := range in.Holders {
				known = known && h.Route != ""
			}
			for _, w := range in.Waiters {
				known = known && w.Route != ""
			}
		}
		if n == 3 && known {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d waiters queued, want 3", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
