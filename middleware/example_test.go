package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// Lock on any engine, configured by hand: here the Redis engine, failing
// fast. A request that finds the lock held gets 409 with Retry-After.
func ExampleLock() {
	mr, err := miniredis.Run() // any Redis; embedded here
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	engine, err := redisengine.New(rdb, redisengine.Options{})
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	locker := lock.FromEngine(engine) // or lock.New(rdb): engine and Locker at once

	r := chi.NewRouter()
	r.With(middleware.Lock(locker, middleware.Config{Key: keyfunc.Param("productID"), Policy: lock.FailFast()})).
		Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
			fence, ok := lock.FencingToken(r.Context()) // the innermost lock's
			fmt.Fprintln(w, "bought, fence > 0:", ok && fence > 0)
		})

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("POST", "/products/42/buy", nil))
	fmt.Print(w.Code, " ", w.Body.String())

	key, _ := lockcore.NewKey("productID", "42") // as the route names it
	held, err := locker.Acquire(context.Background(), key, lock.FailFast())
	if err != nil {
		panic(err)
	}
	w = httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("POST", "/products/42/buy", nil))
	fmt.Print(w.Code, " Retry-After ", w.Header().Get("Retry-After"), " ", w.Body.String())
	_ = held.Release(context.Background())
	// Output:
	// 200 bought, fence > 0: true
	// 409 Retry-After 1 routelock: resource busy, retry later
}

// Check finds, at startup, a lock whose route cannot name its key: here a
// parameter spelt productId on a route of {productID}, which would answer
// every request with 500.
func ExampleCheck() {
	locker := lock.FromEngine(new(locktest.Engine)) // any engine: Check reads only the routes
	r := chi.NewRouter()
	r.With(middleware.Lock(locker, middleware.Config{Key: keyfunc.Param("productId")})).
		Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) {})
	r.With(middleware.Lock(locker, middleware.Config{Key: keyfunc.Param("productID")})).
		Post("/products/{productID}/refund", func(http.ResponseWriter, *http.Request) {})

	err := middleware.Check(r)
	fmt.Println(errors.Is(err, lockcore.ErrMisconfigured))
	fmt.Println(err)
	// Output:
	// true
	// routelock: misconfigured: POST /products/{productID}/buy is locked on Param(productId), but its pattern has no parameter {productId}
}
