// Command seckill is a flash sale: several instances of a shop share one
// Redis, and a few hundred buyers rush at a few items at once. The buy
// handler reads the stock, takes payment, and writes the stock back — a
// read-modify-write that oversells when two instances interleave. The sale
// runs twice, without a lock and with
//
//	r.Use(lock.ByParam("productID"))
//
// and prints the two side by side. It uses the Redis that REDIS_URL names,
// or else an embedded one:
//
//	go run ./examples/seckill
//	go run ./examples/seckill -buyers 500 -items 20 -instances 4 -policy failfast
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/examples/internal/redisenv"
	"github.com/routelock/lock/lockcore/redisengine"
)

// config is what the flags set.
type config struct {
	buyers, items, instances int
	policy                   string        // "wait" or "failfast"
	wait                     time.Duration // for policy "wait"
	payment                  time.Duration // work between reading and writing the stock
}

func main() {
	var c config
	flag.IntVar(&c.buyers, "buyers", 300, "concurrent buyers")
	flag.IntVar(&c.items, "items", 10, "items in stock")
	flag.IntVar(&c.instances, "instances", 3, "app instances, each with its own Redis client and Locker")
	flag.StringVar(&c.policy, "policy", "wait", `lock policy: "wait" (block up to -wait) or "failfast" (409 at once when busy)`)
	flag.DurationVar(&c.wait, "wait", 10*time.Second, "how long a buyer waits for the lock with -policy wait")
	flag.DurationVar(&c.payment, "payment", 2*time.Millisecond, "time the handler spends between reading and writing the stock")
	flag.Parse()
	if err := run(os.Stdout, c); err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		os.Exit(1)
	}
}

// result is one sale.
type result struct {
	sold, stock       int64
	status            map[int]int
	p50, p99, elapsed time.Duration
}

func run(out io.Writer, c config) error {
	switch {
	case c.buyers < 1, c.items < 0, c.instances < 1:
		return errors.New("need at least one buyer and one instance, and no negative stock")
	case c.policy != "wait" && c.policy != "failfast":
		return fmt.Errorf("unknown -policy %q: want wait or failfast", c.policy)
	case c.policy == "wait" && c.wait <= 0:
		return fmt.Errorf("-wait %v: want a positive wait with -policy wait (or -policy failfast)", c.wait)
	}
	env, err := redisenv.Open()
	if err != nil {
		return err
	}
	defer env.Close()
	fmt.Fprintf(out, "flash sale: %d buyers, %d items, %d instances, on %s\n", c.buyers, c.items, c.instances, env.Desc)

	var results [2]result
	for i, locked := range []bool{false, true} {
		results[i], err = sale(out, env, c, locked)
		if err != nil {
			return err
		}
	}
	lockName := `lock.ByParam("productID")`
	if c.policy == "failfast" {
		lockName = `lock.ByParam(…, lock.FailFast())`
	}
	head := "with " + lockName
	w := len([]rune(head))
	fmt.Fprintf(out, "\n%-14s %16s   %*s\n", "", "without lock", w, head)
	row := func(name string, f func(r result) string) {
		fmt.Fprintf(out, "%-14s %16s   %*s\n", name, f(results[0]), w, f(results[1]))
	}
	row("sold", func(r result) string { return strconv.FormatInt(r.sold, 10) })
	row("stock left", func(r result) string { return strconv.FormatInt(r.stock, 10) })
	row("oversold", func(r result) string { return strconv.FormatInt(max(r.sold-int64(c.items), 0), 10) })
	row("200 bought", func(r result) string { return strconv.Itoa(r.status[http.StatusOK]) })
	row("410 sold out", func(r result) string { return strconv.Itoa(r.status[http.StatusGone]) })
	row("409 busy", func(r result) string { return strconv.Itoa(r.status[http.StatusConflict]) })
	if other := c.buyers - results[1].status[200] - results[1].status[410] - results[1].status[409]; other > 0 {
		row("other", func(r result) string {
			return strconv.Itoa(c.buyers - r.status[200] - r.status[410] - r.status[409])
		})
	}
	row("p50 latency", func(r result) string { return ms(r.p50) })
	row("p99 latency", func(r result) string { return ms(r.p99) })
	row("took", func(r result) string { return ms(r.elapsed) })

	locked := results[1]
	want := int64(min(c.items, c.buyers))
	if c.policy == "failfast" {
		// Fail-fast buyers give up when busy: fewer may buy, never more.
		if locked.sold > want || locked.stock != int64(c.items)-locked.sold {
			return fmt.Errorf("with the lock: sold %d, stock %d: the lock did not hold", locked.sold, locked.stock)
		}
		return nil
	}
	if locked.sold != want || locked.stock != int64(c.items)-want {
		return fmt.Errorf("with the lock: sold %d, stock %d; want %d sold: the lock did not hold", locked.sold, locked.stock, want)
	}
	return nil
}

// isTerminal reports whether w is a terminal, where a progress line can
// redraw itself.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// sale runs one flash sale on fresh keys.
func sale(out io.Writer, env *redisenv.Redis, c config, locked bool) (result, error) {
	ctx := context.Background()
	prefix := fmt.Sprintf("seckill:%d:", time.Now().UnixNano())
	stockKey, soldKey := prefix+"stock:42", prefix+"sold:42"

	var urls []string
	for range c.instances {
		url, stop, err := startInstance(env.Client(), prefix, c, locked, stockKey, soldKey)
		if err != nil {
			return result{}, err
		}
		defer stop()
		urls = append(urls, url)
	}
	admin := env.Client()
	defer admin.Close()
	if err := admin.Set(ctx, stockKey, c.items, time.Hour).Err(); err != nil {
		return result{}, fmt.Errorf("setting the stock: %w", err)
	}
	defer admin.Del(ctx, stockKey, soldKey)

	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: c.buyers},
		Timeout:   c.wait + 30*time.Second,
	}
	defer client.CloseIdleConnections()
	name := "without lock"
	if locked {
		name = "with lock"
	}

	var done atomic.Int64
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() { // a progress line while the sale runs
		defer close(progressDone)
		if !isTerminal(out) {
			<-stopProgress
			fmt.Fprintf(out, "  %-12s %d/%d buyers served\n", name, done.Load(), c.buyers)
			return
		}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				fmt.Fprintf(out, "\r  %-12s %d/%d buyers served\n", name, done.Load(), c.buyers)
				return
			case <-t.C:
				fmt.Fprintf(out, "\r  %-12s %d/%d buyers served", name, done.Load(), c.buyers)
			}
		}
	}()

	latencies := make([]time.Duration, c.buyers)
	statuses := make([]int, c.buyers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range c.buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			resp, err := client.Post(urls[i%len(urls)]+"/products/42/buy", "", nil)
			latencies[i] = time.Since(t0)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				statuses[i] = resp.StatusCode
			}
			done.Add(1)
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	close(stopProgress)
	<-progressDone

	r := result{status: map[int]int{}, elapsed: elapsed}
	for _, s := range statuses {
		r.status[s]++
	}
	slices.Sort(latencies)
	r.p50 = latencies[len(latencies)*50/100]
	r.p99 = latencies[min(len(latencies)*99/100, len(latencies)-1)]
	var err error
	if r.sold, err = admin.Get(ctx, soldKey).Int64(); err != nil && !errors.Is(err, redis.Nil) {
		return r, err
	}
	if r.stock, err = admin.Get(ctx, stockKey).Int64(); err != nil {
		return r, err
	}
	return r, nil
}

// startInstance starts one instance of the shop on a loopback port: its
// own Redis client and Locker, and a chi router with the buy route, locked
// or not.
func startInstance(rdb *redis.Client, prefix string, c config, locked bool, stockKey, soldKey string) (url string, stop func(), err error) {
	engine, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix + "lock:"})
	if err != nil {
		return "", nil, err
	}
	locker := lock.FromEngine(engine)

	r := chi.NewRouter()
	if locked {
		policy := lock.FailFast()
		if c.policy == "wait" {
			policy = lock.Wait(c.wait)
		}
		r.Use(locker.ByParam("productID", policy))
	}
	r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		stock, err := rdb.Get(ctx, stockKey).Int64() // read …
		if err != nil {
			http.Error(w, "stock unavailable", http.StatusInternalServerError)
			return
		}
		if stock <= 0 {
			http.Error(w, "sold out", http.StatusGone)
			return
		}
		time.Sleep(c.payment)                                                    // … take payment …
		if err := rdb.Set(ctx, stockKey, stock-1, time.Hour).Err(); err != nil { // … write back
			http.Error(w, "stock unavailable", http.StatusInternalServerError)
			return
		}
		rdb.Incr(ctx, soldKey)
		fmt.Fprintln(w, "bought")
	})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		engine.Close()
		rdb.Close()
		return "", nil, err
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lis)
	return "http://" + lis.Addr().String(), func() {
		srv.Close()
		engine.Close()
		rdb.Close()
	}, nil
}
