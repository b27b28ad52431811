package lock_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	chimiddleware "github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockotel"
)

// The README's HTTP section, as it stands there: the lines between the
// "readme" marks are its code blocks (TestReadmeMatchesExamples keeps them
// equal, and .ci/fresh builds them in a module of their own).
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
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	locker := lock.New(rdb) // one per process
	defer locker.Close()
	lock.SetDefault(locker) // what the package-level lock.ByParam & co. use
	if err := locker.Check(ctx); err != nil {
		panic(err) // Redis unreachable, or set up wrongly (lockcore.ErrMisconfigured)
	}

	r := chi.NewRouter()
	r.Get("/health", health) // not locked
	r.Group(func(r chi.Router) {
		r.Use(lock.ByParam("productID")) // every route of the group is locked on its {productID}
		r.Post("/products/{productID}/buy", buy)
		r.Post("/products/{productID}/refund", refund)
	})
	r.With(locker.ByParam("productID", lock.FailFast())).Post("/products/{productID}/reserve", reserveProduct)
	r.With(locker.By(keyfunc.Join(keyfunc.Context("userID", userKey{}), keyfunc.JSON("order.id")),
		lock.Wait(2*time.Second), lock.TTL(10*time.Second))).Post("/orders", order)
	// readme:end

	srv := httptest.NewServer(r)
	defer srv.Close()
	fmt.Print(get(srv.Client(), "POST", srv.URL+"/products/42/buy"))
	fmt.Print(get(srv.Client(), "POST", srv.URL+"/products/42/reserve"))
	fmt.Print(get(srv.Client(), "GET", srv.URL+"/health"))
	// Output:
	// 200 bought 42 with fence true
	// 200 reserved
	// 200 ok
}

// readme:begin handler
func buy(w http.ResponseWriter, r *http.Request) {
	fence, _ := lock.FencingToken(r.Context()) // … read, change and write the product, passing fence to the store
	fmt.Fprintln(w, "bought", chi.URLParam(r, "productID"), "with fence", fence > 0)
}

type userKey struct{} // the context key your authentication stores the user's ID under

func health(w http.ResponseWriter, _ *http.Request)         { fmt.Fprintln(w, "ok") }
func refund(w http.ResponseWriter, _ *http.Request)         { fmt.Fprintln(w, "refunded") }
func reserveProduct(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "reserved") }
func order(w http.ResponseWriter, _ *http.Request)          { fmt.Fprintln(w, "ordered") }

// readme:end

// readme:begin telemetry
// newObservedLocker is lock.New with OpenTelemetry spans and metrics.
func newObservedLocker(rdb redis.UniversalClient) *lock.Locker {
	tel := lockotel.New(lockotel.Config{}) // the global providers; or Config{TracerProvider: tp, MeterProvider: mp}
	return lock.New(rdb, lock.Observe(tel))
}

// readme:end

// readme:begin admin
// mountAdmin serves the admin page at /admin/ behind auth, your own
// authentication middleware: the handler itself lets everyone in.
func mountAdmin(r chi.Router, locker *lock.Locker, auth func(http.Handler) http.Handler) {
	r.Group(func(r chi.Router) {
		r.Use(auth)
		r.Mount("/admin", admin.Handler(locker.Operator(), admin.Config{Logger: slog.Default()}))
	})
}

// readme:end

// The README's operate section: a Locker with telemetry, and the admin page
// behind Basic auth.
func Example_readmeOperate() {
	mr, err := miniredis.Run() // any Redis; embedded here
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := newObservedLocker(rdb)
	defer locker.Close()

	r := chi.NewRouter()
	mountAdmin(r, locker, chimiddleware.BasicAuth("locks", map[string]string{"ops": "correct horse battery staple"}))
	srv := httptest.NewServer(r)
	defer srv.Close()
	for _, password := range []string{"", "correct horse battery staple"} {
		req, _ := http.NewRequest("GET", srv.URL+"/admin/", nil)
		if password != "" {
			req.SetBasicAuth("ops", password)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Println(res.Status)
	}
	// Output:
	// 401 Unauthorized
	// 200 OK
}
