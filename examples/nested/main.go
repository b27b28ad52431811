// Command nested shows why the owner token travels between services. An
// order service locks product 42 while it places an order and calls the
// inventory service, which locks product 42 too (it is also called on its
// own, and must not race with itself). With middleware.Transport on the order
// service's HTTP client the inventory call carries the order's owner token
// and re-enters the lock the order holds; without it, the inventory waits
// for a lock that its own caller holds until it gives up with 409.
//
//	go run ./examples/nested
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/examples/redisenv"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nested:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	env, err := redisenv.Open()
	if err != nil {
		return err
	}
	defer env.Close()
	fmt.Fprintf(out, "order service → inventory service, both locking productID:42, on %s\n\n", env.Desc)
	// The locks' keys start with a prefix of this run's, and are deleted
	// at the end: a Redis that REDIS_URL names keeps nothing of the run.
	prefix := redisenv.RunPrefix("nested")
	defer func() {
		if err := env.Sweep(context.Background(), prefix); err != nil {
			fmt.Fprintf(out, "deleting the keys %s*: %v\n", prefix, err)
		}
	}()

	// Two services, each with its own Redis client and Locker, as two
	// processes would have.
	invRedis, ordRedis := env.Client(), env.Client()
	defer invRedis.Close()
	defer ordRedis.Close()
	// redisengine.New with a Prefix, given to lock.FromEngine: lock.New's
	// keys are all under "routelock:".
	invEngine, err := redisengine.New(invRedis, redisengine.Options{Prefix: prefix})
	if err != nil {
		return err
	}
	defer invEngine.Close()
	invLocker := lock.FromEngine(invEngine)
	inv := chi.NewRouter()
	inv.With(invLocker.ByParam("productID", lock.Wait(time.Second))).
		Post("/products/{productID}/reserve", func(w http.ResponseWriter, r *http.Request) {
			fence, _ := lock.FencingToken(r.Context())
			held, _ := lockcore.ParseKey(lock.Keys(r.Context())[0]) // the locks this request holds, innermost first
			// A Redis engine can read a key's state.
			info, err := invLocker.Operator().Inspect(r.Context(), held)
			if err != nil {
				http.Error(w, "inventory: "+err.Error(), http.StatusInternalServerError)
				return
			}
			var count int
			for _, h := range info.Holders {
				count = h.Count
			}
			fmt.Fprintf(w, "reserved under fencing token %d, hold count %d", fence, count)
		})
	invURL, stopInv, err := serve(inv)
	if err != nil {
		return err
	}
	defer stopInv()

	ordEngine, err := redisengine.New(ordRedis, redisengine.Options{Prefix: prefix})
	if err != nil {
		return err
	}
	defer ordEngine.Close()
	ordLocker := lock.FromEngine(ordEngine)
	for _, propagate := range []bool{true, false} {
		// The order service, with or without middleware.Transport on its client.
		client := &http.Client{Timeout: 10 * time.Second}
		if propagate {
			client.Transport = middleware.Transport(http.DefaultTransport)
		}
		ord := chi.NewRouter()
		ord.With(ordLocker.ByParam("productID")).Post("/orders/{productID}", func(w http.ResponseWriter, r *http.Request) {
			fence, _ := lock.FencingToken(r.Context())
			// Call with the request's context: that is where the token is.
			req, _ := http.NewRequestWithContext(r.Context(), "POST", invURL+"/products/"+chi.URLParam(r, "productID")+"/reserve", nil)
			resp, err := client.Do(req)
			if err != nil {
				http.Error(w, "inventory unreachable", http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				http.Error(w, fmt.Sprintf("inventory answered %d: %s", resp.StatusCode, strings.TrimSpace(string(body))), http.StatusBadGateway)
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "order placed under fencing token %d; inventory %s", fence, body)
		})
		ordURL, stopOrd, err := serve(ord)
		if err != nil {
			return err
		}
		t0 := time.Now()
		resp, err := http.Post(ordURL+"/orders/42", "", nil)
		if err != nil {
			stopOrd()
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(t0)
		stopOrd()

		name := "with middleware.Transport"
		if !propagate {
			name = "without it"
		}
		fmt.Fprintf(out, "%s: %d in %.1f ms\n  %s\n", name, resp.StatusCode, float64(took.Microseconds())/1000, strings.TrimSpace(string(body)))
		switch {
		case propagate && resp.StatusCode != http.StatusCreated:
			return errors.New("with the token the inventory should have re-entered the lock")
		case !propagate && resp.StatusCode != http.StatusBadGateway:
			return errors.New("without the token the inventory should have been refused")
		}
	}
	fmt.Fprintln(out, "\nWith the token the nested lock re-enters (same fencing token, count 2);")
	fmt.Fprintln(out, "without it the inventory waits for its own caller and gives up: 409 after its 1s wait.")
	return nil
}

// serve serves h on a loopback port.
func serve(h http.Handler) (url string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lis)
	return "http://" + lis.Addr().String(), func() { srv.Close() }, nil
}
