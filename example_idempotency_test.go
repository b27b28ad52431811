package lock_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/middleware"
)

// A payment route that runs once per Idempotency-Key: the client's retry
// gets the first response, marked as a replay, and the handler does not
// run again.
func ExampleLocker_Idempotent() {
	mr, err := miniredis.Run() // any Redis; embedded here
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	locker := lock.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	defer locker.Close()

	// readme:begin idempotency
	r := chi.NewRouter()
	r.With(locker.Idempotent()).Post("/payments", pay)
	// Keys scoped by the caller too, and duplicates answered 409 at once
	// instead of waiting for the first request's response:
	r.With(middleware.Idempotency(locker, middleware.IdempotencyConfig{
		Caller: func(r *http.Request) (string, error) { return userOf(r) },
		Policy: lock.FailFast(),
	})).Post("/transfers", pay)
	// readme:end

	srv := httptest.NewServer(r)
	defer srv.Close()
	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/payments", strings.NewReader(`{"amount":5}`))
		req.Header.Set("Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		resp, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s replayed=%q\n", resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"))
	}
	fmt.Println("charged", charges, "time")
	// Output:
	// 201 payment 1 replayed=""
	// 201 payment 1 replayed="true"
	// charged 1 time
}

var charges int

func pay(w http.ResponseWriter, r *http.Request) {
	charges++ // … charge the card, passing lock.FencingToken(r.Context()) to the store
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, "payment ", charges)
}

func userOf(r *http.Request) (string, error) {
	if u := r.Header.Get("X-User"); u != "" { // your authentication's verified user, in truth
		return u, nil
	}
	return "", fmt.Errorf("no user")
}
