package lock_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore/locktest"
)

// Testing your own handlers without Redis: a Locker on the in-memory engine
// of package locktest locks a chi route as the Redis one would. The first
// request holds productID:42 until the test lets it go (channels, no
// sleeps); a second request for the same product on a FailFast route gets
// 409 meanwhile. The lines between the "readme" marks are the README's block.
func Example_testingHandlers() {
	// readme:begin handlertest
	locker := lock.FromEngine(new(locktest.Engine)) // in memory: no Redis
	defer locker.Close()

	entered, release := make(chan struct{}), make(chan struct{})
	r := chi.NewRouter()
	r.With(locker.ByParam("productID", lock.FailFast())).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{} // the first request holds productID:42 here
		<-release             // until the test lets it go
		fmt.Fprintln(w, "bought")
	})

	first, done := httptest.NewRecorder(), make(chan struct{})
	go func() {
		r.ServeHTTP(first, httptest.NewRequest("POST", "/products/42/buy", nil))
		close(done)
	}()
	<-entered

	second := httptest.NewRecorder() // the same product while the first holds it
	r.ServeHTTP(second, httptest.NewRequest("POST", "/products/42/buy", nil))
	close(release)
	<-done
	fmt.Print("first: ", first.Code, " ", first.Body.String())
	fmt.Println("second:", second.Code, second.Header().Get("Retry-After") != "")
	// readme:end

	// Output:
	// first: 200 bought
	// second: 409 true
}
