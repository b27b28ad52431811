package lock_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/keyfunc"
)

// The README's HTTP section, as it stands there: the lines between the
// "readme" marks are its code block (TestReadmeMatchesExamples keeps them
// equal).
func Example_readme() {
	mr, err := miniredis.Run() // any Redis; embedded here
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	addr := mr.Addr()
	ctx := context.Background()
	defer lock.SetDefault(nil)

	// readme:begin http
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}) // see Client options
	locker := lock.New(rdb)                                                         // one per process
	defer locker.Close()
	lock.SetDefault(locker) // what the package-level lock.ByParam & co. use
	if err := locker.Check(ctx); err != nil {
		panic(err) // Redis unreachable or set up wrongly: see At startup
	}

	r := chi.NewRouter()
	r.Get("/health", health) // not locked
	r.Group(func(r chi.Router) {
		r.Use(lock.ByParam("productID")) // every route of the group is locked on its {productID}
		r.Post("/products/{productID}/buy", buy)
		r.Post("/products/{productID}/refund", refund)
	})
	r.With(locker.ByParam("productID", lock.FailFast())).Post("/products/{productID}/reserve", reserveHandler)
	r.With(locker.By(keyfunc.Join(keyfunc.Context("userID", userKey{}), keyfunc.JSON("order.id")),
		lock.Wait(2*time.Second), lock.TTL(10*time.Second))).Post("/orders", order)
	// readme:end

	srv := httptest.NewServer(r)
	defer srv.Close()
	fmt.Print(get(srv.Client(), "POST", srv.URL+"/products/42/buy"))
	fmt.Print(get(srv.Client(), "GET", srv.URL+"/health"))
	// Output:
	// 200 bought 42 with fence true
	// 200 ok
}

// readme:begin handler
func buy(w http.ResponseWriter, r *http.Request) {
	fence, _ := lock.FencingToken(r.Context()) // pass it to the store you write
	// … read, change and write product {productID}; nested calls made with
	// r.Context() through an http.Client whose Transport is
	// middleware.Transport(nil) re-enter this lock.
	fmt.Fprintln(w, "bought", chi.URLParam(r, "productID"), "with fence", fence > 0)
}

// readme:end

type userKey struct{}

func health(w http.ResponseWriter, _ *http.Request)         { fmt.Fprintln(w, "ok") }
func refund(w http.ResponseWriter, _ *http.Request)         { fmt.Fprintln(w, "refunded") }
func reserveHandler(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "reserved") }
func order(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintln(w, "ordered", strings.TrimSpace(r.URL.Path))
}
