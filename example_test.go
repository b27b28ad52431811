package lock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

func get(c *http.Client, method, url string) string {
	req, _ := http.NewRequest(method, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}

// The one-line contract: every route with {productID} is locked on that
// product while its handler runs; other routes pass through.
func Example() {
	mr := miniredis.NewMiniRedis() // any Redis; miniredis keeps the example self-contained
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	r := chi.NewRouter()
	r.Use(lock.ByParam("productID"))
	r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		fence, _ := lock.FencingToken(r.Context())
		fmt.Fprintln(w, "bought, holding", lock.Keys(r.Context()), "fence > 0:", fence > 0)
	})
	r.Get("/health", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok, holding", lock.Keys(r.Context()))
	})

	locker := lock.New(rdb)
	defer locker.Close()
	lock.SetDefault(locker) // may come after the routes: looked up per request
	defer lock.SetDefault(nil)

	srv := httptest.NewServer(r)
	defer srv.Close()
	fmt.Print(get(srv.Client(), "POST", srv.URL+"/products/42/buy"))
	fmt.Print(get(srv.Client(), "GET", srv.URL+"/health"))
	// Output:
	// 200 bought, holding [productID:42] fence > 0: true
	// 200 ok, holding []
}

// A fail-fast route answers 409 while another owner holds the lock.
func ExampleFailFast() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	r := chi.NewRouter()
	r.With(locker.ByParam("userID", lock.FailFast())).Post("/users/{userID}/checkout", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "checked out")
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	// Another request holds user 7: hold it here through the engine.
	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		h := locker.ByParam("userID")(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			close(held)
			<-release
		}))
		hr := chi.NewRouter()
		hr.Handle("/users/{userID}/checkout", h)
		hr.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/users/7/checkout", nil))
	}()
	<-held
	fmt.Print(get(srv.Client(), "POST", srv.URL+"/users/7/checkout"))
	close(release)
	<-done
	fmt.Print(get(srv.Client(), "POST", srv.URL+"/users/7/checkout"))
	// Output:
	// 409 routelock: resource busy, retry later
	// 200 checked out
}

// A key of several parts: the product and the user.
func ExampleLocker_By() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	r := chi.NewRouter()
	r.With(locker.By(keyfunc.Join(keyfunc.Param("productID"), keyfunc.Header("X-User-ID")))).
		Post("/products/{productID}/cart", func(w http.ResponseWriter, r *http.Request) {
			fmt.Println(lock.Keys(r.Context()))
		})
	req := httptest.NewRequest("POST", "/products/42/cart", nil)
	req.Header.Set("X-User-ID", "u7")
	r.ServeHTTP(httptest.NewRecorder(), req)

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("POST", "/products/42/cart", nil))
	fmt.Print(w.Code, " ", w.Body.String())
	// Output:
	// [productID:42:X-User-Id:u7]
	// 400 routelock: invalid lock key: Header(X-User-Id): missing
}

// A handler that holds productID:42 calls another service that locks
// productID:42 too. The client's Transport carries the owner token, so the
// nested call re-enters the lock instead of waiting for it.
func ExampleTransport() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb, lock.Defaults(lock.Wait(time.Second)))
	defer locker.Close()

	inventory := chi.NewRouter()
	inventory.With(locker.ByParam("productID")).Post("/products/{productID}/reserve", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "reserved")
	})
	inv := httptest.NewServer(inventory)
	defer inv.Close()

	client := &http.Client{Transport: middleware.Transport(http.DefaultTransport)}
	shop := chi.NewRouter()
	shop.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), "POST", inv.URL+"/products/42/reserve", nil)
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(w, "inventory said %d %s", resp.StatusCode, b)
	})
	w := httptest.NewRecorder()
	shop.ServeHTTP(w, httptest.NewRequest("POST", "/products/42/buy", nil).WithContext(context.Background()))
	fmt.Println(w.Body.String())
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	// Output:
	// inventory said 200 reserved
}

// A ceiling on one hold: a handler still running when its request has held
// the lock for MaxHold has its context cancelled with lockcore.ErrMaxHold,
// and the lock goes to the next request at once.
func ExampleMaxHold() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	holding := make(chan struct{})
	ended := make(chan error, 1)
	r := chi.NewRouter()
	r.With(locker.ByParam("productID", lock.MaxHold(200*time.Millisecond))).Post("/products/{productID}/restock", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("stuck") {
			close(holding)
			<-r.Context().Done() // a handler that would run on and on
			ended <- context.Cause(r.Context())
			return
		}
		fmt.Fprintln(w, "restocked")
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	go get(srv.Client(), "POST", srv.URL+"/products/42/restock?stuck")
	<-holding
	fmt.Print(get(srv.Client(), "POST", srv.URL+"/products/42/restock")) // waits for the ceiling
	fmt.Println("the stuck handler's context ended with ErrMaxHold:", errors.Is(<-ended, lockcore.ErrMaxHold))
	// Output:
	// 200 restocked
	// the stuck handler's context ended with ErrMaxHold: true
}

// Readers share a product's lock; a writer holds it alone, and a
// reader's request that asks for it as a writer is refused at once.
func ExampleShared() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	reading, leave, done := make(chan struct{}), make(chan struct{}), make(chan string)
	r := chi.NewRouter()
	r.With(locker.ByParam("productID", lock.Shared())).Get("/products/{productID}", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("slow") {
			close(reading)
			<-leave
		}
		fmt.Fprintln(w, "read")
	})
	r.With(locker.ByParam("productID", lock.FailFast())).Put("/products/{productID}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "written")
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	go func() { done <- get(srv.Client(), "GET", srv.URL+"/products/42?slow") }()
	<-reading
	fmt.Print(get(srv.Client(), "GET", srv.URL+"/products/42")) // a second reader beside the first
	fmt.Print(get(srv.Client(), "PUT", srv.URL+"/products/42")) // a writer, failing fast
	close(leave)
	fmt.Print(<-done)
	fmt.Print(get(srv.Client(), "PUT", srv.URL+"/products/42"))
	// Output:
	// 200 read
	// 409 routelock: resource busy, retry later
	// 200 read
	// 200 written
}

// Up to two buyers of a product at once, each in a slot of its own: here
// the stock segment it takes from.
func ExamplePermits() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	inside, leave := make(chan struct{}, 2), make(chan struct{})
	r := chi.NewRouter()
	r.With(locker.ByParam("productID", lock.Permits(2), lock.FailFast())).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		slot, _ := lock.Slot(r.Context())
		if r.URL.Query().Has("slow") {
			inside <- struct{}{}
			<-leave
		}
		fmt.Fprintf(w, "bought from segment %d\n", slot)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	first := make(chan string)
	go func() { first <- get(srv.Client(), "POST", srv.URL+"/products/42/buy?slow") }()
	<-inside
	second := make(chan string)
	go func() { second <- get(srv.Client(), "POST", srv.URL+"/products/42/buy?slow") }()
	<-inside
	fmt.Print(get(srv.Client(), "POST", srv.URL+"/products/42/buy")) // a third buyer
	leave <- struct{}{}
	leave <- struct{}{}
	fmt.Print(<-first)
	fmt.Print(<-second)
	fmt.Print(get(srv.Client(), "POST", srv.URL+"/products/42/buy"))
	// Output:
	// 409 routelock: resource busy, retry later
	// 200 bought from segment 0
	// 200 bought from segment 1
	// 200 bought from segment 0
}

// A purchase locks the product and the buyer, all or nothing; a refund
// names them the other way round and still never deadlocks with it.
func ExampleLocker_By_severalResources() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	product, buyer := keyfunc.Param("productID"), keyfunc.Header("X-User-ID").As("userID")
	r := chi.NewRouter()
	r.With(locker.By(product.Also(buyer))).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "bought under", lock.Keys(r.Context()))
	})
	r.With(locker.By(buyer.Also(product))).Post("/products/{productID}/refund", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "refunded under", lock.Keys(r.Context()))
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	for _, path := range []string{"/products/42/buy", "/products/42/refund"} {
		req, _ := http.NewRequest("POST", srv.URL+path, nil)
		req.Header.Set("X-User-ID", "u7")
		resp, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Print(resp.StatusCode, " ", string(b))
	}
	// Output:
	// 200 bought under [userID:u7 productID:42]
	// 200 refunded under [userID:u7 productID:42]
}

// One phone in stock: the first buyer gets it, the second finds it sold
// out and closes the product's gate; from then on buyers are answered
// 410 at once, without the handler and without a call to Redis.
func ExampleSoldOut() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	stock, ran := 1, 0
	r := chi.NewRouter()
	r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		ran++
		// readme:begin soldout
		if stock == 0 {
			_ = lock.SoldOut(r.Context(), 0) // 0: until opened; or a time
			http.Error(w, "sold out", http.StatusGone)
			return
		}
		// readme:end
		stock--
		fmt.Fprintln(w, "bought")
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	for range 4 {
		fmt.Print(get(srv.Client(), "POST", srv.URL+"/products/42/buy"))
	}
	fmt.Println("handler ran", ran, "times")
	// Output:
	// 200 bought
	// 410 sold out
	// 410 routelock: sold out
	// 410 routelock: sold out
	// handler ran 2 times
}

// A sold-out product's page still shows that none is left (a reader
// route passes the closed gate), and its restock route runs through the
// gate and reopens it: buyers are served again.
func ExampleRestock() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	stock := 0
	show := func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, stock, "left") }
	r := chi.NewRouter()
	r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		if stock == 0 {
			_ = lock.SoldOut(r.Context(), 0)
			http.Error(w, "sold out", http.StatusGone)
			return
		}
		stock--
		fmt.Fprintln(w, "bought")
	})
	// readme:begin restock
	r.With(locker.ByParam("productID", lock.Shared())).Get("/products/{productID}", show) // "0 left"
	r.With(locker.ByParam("productID", lock.Restock())).Post("/products/{productID}/restock", func(w http.ResponseWriter, r *http.Request) {
		stock += 100
		if err := lock.InStock(r.Context()); err != nil { // reopens the gate on every instance
			http.Error(w, "restocked; the gate is still closed: retry", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "restocked")
	})
	// readme:end
	srv := httptest.NewServer(r)
	defer srv.Close()

	for _, req := range [][2]string{{"POST", "/buy"}, {"POST", "/buy"}, {"GET", ""}, {"POST", "/restock"}, {"POST", "/buy"}, {"GET", ""}} {
		fmt.Print(get(srv.Client(), req[0], srv.URL+"/products/42"+req[1]))
	}
	// Output:
	// 410 sold out
	// 410 routelock: sold out
	// 200 0 left
	// 200 restocked
	// 200 bought
	// 200 99 left
}

// A product's stock of 4 kept as 2 segments of 2, each sold under its
// own lock, so that two buyers pay at once. A buyer whose segment is empty
// moves on to the other (its request is served again there); once both
// are empty, buyers are answered 410 at once.
func ExampleSegments() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := lock.New(rdb)
	defer locker.Close()

	stock := []int{2, 2} // each guarded by its segment's lock
	r := chi.NewRouter()
	// readme:begin segments
	r.With(locker.ByParam("productID", lock.Segments(2))).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		seg, _ := lock.Slot(r.Context()) // 0 or 1: no other buyer's meanwhile
		for stock[seg] == 0 {
			// Moves the request to the other segment in place; fails when
			// none is open (410) or the others stay busy (409).
			if err := lock.NextSegment(r.Context()); err != nil {
				middleware.Error(w, r, err)
				return
			}
			seg, _ = lock.Slot(r.Context())
		}
		stock[seg]--
		fmt.Fprintln(w, "bought")
	})
	// readme:end
	srv := httptest.NewServer(r)
	defer srv.Close()

	for range 6 {
		fmt.Print(get(srv.Client(), "POST", srv.URL+"/products/42/buy"))
	}
	fmt.Println("left:", stock)
	// Output:
	// 200 bought
	// 200 bought
	// 200 bought
	// 200 bought
	// 410 routelock: sold out
	// 410 routelock: sold out
	// left: [0 0]
}

// NewRedis makes a Locker whose Redis engine has options of its own: here
// an instance name and a key prefix. lock.Logger reaches that engine too.
func ExampleNewRedis() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	locker := lock.NewRedis(rdb, redisengine.Options{Name: "checkout-1", Prefix: "shop:"})
	defer locker.Close()
	r := chi.NewRouter()
	r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		held := slices.ContainsFunc(mr.Keys(), func(k string) bool { return strings.HasPrefix(k, "shop:{productID:42}") })
		fmt.Fprintln(w, "bought; the lock's key in Redis starts with shop:", held)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	fmt.Print(get(srv.Client(), "POST", srv.URL+"/products/42/buy"))
	// Output:
	// 200 bought; the lock's key in Redis starts with shop: true
}
