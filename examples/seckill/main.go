// Command seckill is a flash sale: several instances of a shop share one
// Redis, and many buyers rush at a few items at once. The buy handler
// reads the stock, takes payment, and writes the stock back — a
// read-modify-write that oversells when two instances interleave. The sale
// runs twice, without a lock and with
//
//	r.Use(lock.ByParam("productID"))
//
// and prints the two side by side. With -segments N the stock is kept as
// N parts, each sold under its own lock (lock.Segments(N)), so that N
// buyers pay at once. Once the product is sold out, the locked shop
// answers 410 Gone from memory on every instance (lock.SoldOut,
// lock.NextSegment); seckill measures how soon each instance knew, and how
// fast it answers then, beside a handler that answers 410 without a lock.
// It uses the Redis that REDIS_URL names, the Cluster that
// REDIS_CLUSTER_URL names, or else an embedded one; its keys start with a
// prefix of the run's own ("seckill:<random>:"), and are deleted at exit.
// With -quorum N the locks are taken on a quorum of N independent masters
// (package lockcore/quorumengine), N embedded ones, or those that
// REDIS_QUORUM_URLS names (redis:// URLs, comma-separated), while the
// stock stays where it was:
//
//	go run ./examples/seckill
//	go run ./examples/seckill -buyers 500 -items 20 -instances 4 -policy failfast
//	go run ./examples/seckill -buyers 10000 -items 2000 -segments 8 -payment 1ms
//	go run ./examples/seckill -quorum 3
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/examples/redisenv"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/quorumengine"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// config is what the flags set.
type config struct {
	buyers, items, instances int
	segments                 int           // 0: one lock for the product
	conns                    int           // buyers whose requests are in flight at once
	policy                   string        // "wait" or "failfast"
	wait                     time.Duration // for policy "wait"
	payment                  time.Duration // work between reading and writing the stock
	answers                  int           // requests per instance and route measured after the sale
	quorum                   int           // lock on a quorum of this many masters; 0: on the one Redis
}

func main() {
	var c config
	flag.IntVar(&c.buyers, "buyers", 300, "buyers")
	flag.IntVar(&c.items, "items", 10, "items in stock")
	flag.IntVar(&c.instances, "instances", 3, "app instances, each with its own Redis client and Locker")
	flag.IntVar(&c.segments, "segments", 0, "keep the stock as this many parts, each under its own lock (lock.Segments); 0: one lock for the product")
	flag.IntVar(&c.conns, "conns", 512, "buyers in flight at once (each on a connection of its own); the others wait their turn")
	flag.StringVar(&c.policy, "policy", "wait", `lock policy: "wait" (block up to -wait) or "failfast" (409 at once when busy)`)
	flag.DurationVar(&c.wait, "wait", 10*time.Second, "how long a buyer waits for the lock with -policy wait")
	flag.DurationVar(&c.payment, "payment", 2*time.Millisecond, "time the handler spends between reading and writing the stock")
	flag.IntVar(&c.answers, "answers", 3000, "requests per instance and route measured after the sale (sold out): 0 to skip")
	flag.IntVar(&c.quorum, "quorum", 0, "take the locks on a quorum of this many independent masters (embedded, or REDIS_QUORUM_URLS); 0: on the one Redis")
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
	selling           time.Duration   // from the start to the last sale
	gateLag           []time.Duration // per instance: the sold-out gate known, after the last sale; -1: never
	after             *afterSale      // the answers to buyers of the sold-out product
}

// afterSale is what seckill measured once the product was sold out.
type afterSale struct {
	locked, unlocked float64 // answers per second
	requests         int64   // requests sent to the locked route
	clientCmds       int64   // commands the instances' clients sent meanwhile
	serverCmds       int64   // commands Redis ran meanwhile (INFO commandstats); -1: unknown
}

func run(out io.Writer, c config) error {
	switch {
	case c.buyers < 1, c.items < 0, c.instances < 1, c.conns < 1:
		return errors.New("need at least one buyer, instance and connection, and no negative stock")
	case c.policy != "wait" && c.policy != "failfast":
		return fmt.Errorf("unknown -policy %q: want wait or failfast", c.policy)
	case c.policy == "wait" && c.wait <= 0:
		return fmt.Errorf("-wait %v: want a positive wait with -policy wait (or -policy failfast)", c.wait)
	case c.segments < 0 || c.segments > 256:
		return fmt.Errorf("-segments %d: want 0 to 256 (lock.Segments)", c.segments)
	case c.answers < 0:
		return fmt.Errorf("-answers %d: want 0 or more", c.answers)
	case c.quorum < 0 || c.quorum > 9:
		return fmt.Errorf("-quorum %d: want 0 to 9 masters", c.quorum)
	}
	env, err := redisenv.Open()
	if err != nil {
		return err
	}
	defer env.Close()
	var q *quorum
	if c.quorum > 0 || os.Getenv("REDIS_QUORUM_URLS") != "" {
		if q, err = openQuorum(c.quorum); err != nil {
			return err
		}
		defer q.close()
	}
	where := env.Desc
	if q != nil {
		where += "; locks on " + q.desc
	}
	fmt.Fprintf(out, "flash sale: %d buyers (%d at once), %d items, %d instances, on %s\n", c.buyers, min(c.conns, c.buyers), c.items, c.instances, where)
	// Every key of this run, the locks' included, starts with prefix, and
	// is deleted at the end: a Redis that REDIS_URL names keeps nothing of
	// it.
	prefix := redisenv.RunPrefix("seckill")
	defer func() {
		if err := env.Sweep(context.Background(), prefix); err != nil {
			fmt.Fprintf(out, "deleting the keys %s*: %v\n", prefix, err)
		}
		if q != nil {
			if err := q.sweep(context.Background(), prefix); err != nil {
				fmt.Fprintf(out, "deleting the keys %s* on the quorum's masters: %v\n", prefix, err)
			}
		}
	}()

	var results [2]result
	for i, locked := range []bool{false, true} {
		results[i], err = sale(out, env, q, prefix+strconv.Itoa(i)+":", c, locked)
		if err != nil {
			return err
		}
	}
	lockName := `lock.ByParam("productID")`
	switch {
	case c.segments > 0 && c.policy == "failfast":
		lockName = fmt.Sprintf(`lock.ByParam(…, lock.Segments(%d), lock.FailFast())`, c.segments)
	case c.segments > 0:
		lockName = fmt.Sprintf(`lock.ByParam(…, lock.Segments(%d))`, c.segments)
	case c.policy == "failfast":
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
	row("sales/s", func(r result) string {
		if r.sold == 0 || r.selling <= 0 {
			return "-"
		}
		return strconv.FormatFloat(float64(r.sold)/r.selling.Seconds(), 'f', 0, 64)
	})
	row("p50 latency", func(r result) string { return ms(r.p50) })
	row("p99 latency", func(r result) string { return ms(r.p99) })
	row("took", func(r result) string { return ms(r.elapsed) })

	locked := results[1]
	if lags := locked.gateLag; len(lags) > 0 {
		fmt.Fprintf(out, "\nafter the sale, with the lock:\n")
		var ls []string
		for _, l := range lags {
			if l == -1 {
				ls = append(ls, "never")
				continue
			}
			ls = append(ls, ms(l))
		}
		fmt.Fprintf(out, "  sold out known, after the last sale, on each instance: %s\n", strings.Join(ls, " / "))
	}
	if a := locked.after; a != nil {
		fmt.Fprintf(out, "  410 answers/s for the sold-out product: %.0f through the lock, %.0f from a handler without one (%.2f×)\n",
			a.locked, a.unlocked, a.locked/a.unlocked)
		server := "not counted (the embedded Redis keeps no INFO commandstats)"
		if a.serverCmds >= 0 {
			server = strconv.FormatInt(a.serverCmds, 10) + " (INFO commandstats)"
		}
		fmt.Fprintf(out, "  Redis commands for %d requests through the lock: %d sent by the instances; run by Redis: %s\n",
			a.requests, a.clientCmds, server)
	}

	for _, l := range locked.gateLag {
		if l < -1 {
			return fmt.Errorf("with the lock: an instance knew the product sold out %v before its last sale", -l)
		}
	}
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

// shop is the Redis keys of one sale: the stock, in parts with -segments,
// and the count of items sold.
type shop struct {
	stock []string
	sold  string
}

// sale runs one flash sale on fresh keys, each starting with prefix, which
// run deletes at the end.
func sale(out io.Writer, env *redisenv.Redis, q *quorum, prefix string, c config, locked bool) (result, error) {
	ctx := context.Background()
	s := shop{sold: prefix + "sold:42"}
	parts := max(c.segments, 1)
	for i := range parts {
		s.stock = append(s.stock, prefix+"stock:42:"+strconv.Itoa(i))
	}
	admin := env.Client()
	defer admin.Close()
	for i, k := range s.stock {
		n := c.items / parts // the first items%parts parts have one more
		if i < c.items%parts {
			n++
		}
		if err := admin.Set(ctx, k, n, time.Hour).Err(); err != nil {
			return result{}, fmt.Errorf("setting the stock: %w", err)
		}
	}

	var lastSale atomic.Int64 // unix nanoseconds
	instances := make([]*instance, c.instances)
	for i := range instances {
		in, err := startInstance(env.Client(), q, prefix, c, locked, s, &lastSale)
		if err != nil {
			return result{}, err
		}
		defer in.stop()
		instances[i] = in
	}

	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: min(c.conns, c.buyers)},
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

	// With the lock, each instance is watched for the moment it knows the
	// product sold out (its gate closed).
	gateAt := make([]atomic.Int64, len(instances))
	stopWatch := make(chan struct{})
	var watching sync.WaitGroup
	watch := locked && instances[0].gates != nil // a quorum engine keeps no gates
	if watch {
		for i, in := range instances {
			watching.Add(1)
			go func() {
				defer watching.Done()
				for {
					if _, err := in.gates.GateOf(context.Background(), productKey); errors.Is(err, lockcore.ErrGateClosed) {
						gateAt[i].Store(time.Now().UnixNano())
						return
					}
					select {
					case <-stopWatch:
						return
					case <-time.After(200 * time.Microsecond):
					}
				}
			}()
		}
	}

	latencies := make([]time.Duration, c.buyers)
	statuses := make([]int, c.buyers)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(c.conns, c.buyers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				resp, err := client.Post(instances[i%len(instances)].url+"/products/42/buy", "text/plain", strings.NewReader("buyer "+strconv.Itoa(i)))
				latencies[i] = time.Since(t0)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					statuses[i] = resp.StatusCode
				}
				done.Add(1)
			}
		}()
	}
	t0 := time.Now()
	for i := range c.buyers {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(t0)
	close(stopProgress)
	<-progressDone

	r := result{status: map[int]int{}, elapsed: elapsed}
	for _, s := range statuses {
		r.status[s]++
	}
	if at := lastSale.Load(); at != 0 {
		r.selling = time.Unix(0, at).Sub(t0)
	}
	slices.Sort(latencies)
	r.p50 = latencies[len(latencies)*50/100]
	r.p99 = latencies[min(len(latencies)*99/100, len(latencies)-1)]
	var err error
	if r.sold, err = admin.Get(ctx, s.sold).Int64(); err != nil && !errors.Is(err, redis.Nil) {
		return r, err
	}
	for _, k := range s.stock {
		n, err := admin.Get(ctx, k).Int64()
		if err != nil {
			return r, err
		}
		r.stock += n
	}
	if !locked {
		return r, nil
	}

	soldOut := r.stock == 0
	if soldOut && watch {
		// Every instance learns of it within moments; give them a second.
		deadline := time.Now().Add(time.Second)
		for i := range gateAt {
			for gateAt[i].Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
	}
	close(stopWatch)
	watching.Wait()
	if last := lastSale.Load(); soldOut && watch && last != 0 {
		for i := range gateAt {
			lag := time.Duration(-1)
			if at := gateAt[i].Load(); at != 0 {
				lag = time.Duration(at - last) // negative: closed before the last sale, which run reports
			}
			r.gateLag = append(r.gateLag, lag)
		}
	}
	if soldOut && watch && c.answers > 0 { // the answers from memory are the gates'
		r.after, err = measureAfter(ctx, c, client, admin, instances)
		if err != nil {
			return r, err
		}
	}
	return r, nil
}

// measureAfter measures the answers to buyers of the sold-out product:
// through the lock (which answers 410 from memory) and, for comparison,
// from a route without a lock whose handler answers 410 at once; the
// same number of requests to each, in three rounds, the best round each.
func measureAfter(ctx context.Context, c config, client *http.Client, admin redis.UniversalClient, instances []*instance) (*afterSale, error) {
	rate := func(path string) (float64, error) {
		var failed atomic.Int64
		var wg sync.WaitGroup
		n := c.answers * len(instances)
		next := make(chan int, 64)
		t0 := time.Now()
		for range min(c.conns, 32) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					resp, err := client.Post(instances[i%len(instances)].url+path, "text/plain", nil)
					if err != nil {
						failed.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusGone {
						failed.Add(1)
					}
				}
			}()
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
		if f := failed.Load(); f > 0 {
			return 0, fmt.Errorf("after the sale, %d of %d requests to %s were not answered 410", f, n, path)
		}
		return float64(n) / time.Since(t0).Seconds(), nil
	}
	a := &afterSale{}
	clientBefore := int64(0)
	for _, in := range instances {
		clientBefore += in.cmds.Load()
	}
	serverBefore, asked := commandCount(ctx, admin)
	for range 3 {
		r, err := rate("/products/42/buy")
		if err != nil {
			return nil, err
		}
		a.locked = max(a.locked, r)
		a.requests += int64(c.answers * len(instances))
	}
	for _, in := range instances {
		a.clientCmds += in.cmds.Load()
	}
	a.clientCmds -= clientBefore
	a.serverCmds = -1
	if serverBefore >= 0 {
		if after, _ := commandCount(ctx, admin); after >= 0 {
			a.serverCmds = after - serverBefore - asked // the INFOs that read serverBefore
		}
	}
	for range 3 {
		r, err := rate("/products/42/gone")
		if err != nil {
			return nil, err
		}
		a.unlocked = max(a.unlocked, r)
	}
	return a, nil
}

// commandCount returns the number of commands Redis has run, summed over
// a Cluster's masters, by INFO commandstats, and how many servers it asked
// (an INFO each, which the next count includes); -1 when it cannot tell
// (the embedded Redis has no commandstats).
func commandCount(ctx context.Context, rdb redis.UniversalClient) (n, asked int64) {
	count := func(c *redis.Client) (int64, error) {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, err
		}
		var n int64
		found := false
		for line := range strings.SplitSeq(info, "\n") {
			if !strings.HasPrefix(line, "cmdstat_") {
				continue
			}
			_, rest, _ := strings.Cut(line, ":calls=")
			calls, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				return 0, err
			}
			n += v
			found = true
		}
		if !found {
			return 0, errors.New("no commandstats")
		}
		return n, nil
	}
	switch c := rdb.(type) {
	case *redis.Client:
		n, err := count(c)
		if err != nil {
			return -1, 0
		}
		return n, 1
	case *redis.ClusterClient:
		var total, masters atomic.Int64
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			n, err := count(m)
			total.Add(n)
			masters.Add(1)
			return err
		})
		if err != nil {
			return -1, 0
		}
		return total.Load(), masters.Load()
	}
	return -1, 0
}

// productKey is the lock key of product 42, whose gate closes when it is
// sold out.
var productKey, _ = lockcore.NewKey("productID", "42")

// instance is one app instance.
type instance struct {
	url   string
	gates lockcore.Gatekeeper // its engine's gates; nil for a quorum engine, which keeps none
	cmds  atomic.Int64        // commands its Redis clients sent
	stop  func()
}

// counter counts the commands a Redis client sends, but for the
// engine's reads of the closed gates in the background (HGETALL, every
// 30 s and when its subscription comes back), which are not a request's:
// no request sends HGETALL.
type counter struct{ n *atomic.Int64 }

func (counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}
func (c counter) count(cmd redis.Cmder) {
	if cmd.Name() != "hgetall" {
		c.n.Add(1)
	}
}

// startInstance starts one instance of the shop on a loopback port: its
// own Redis client and Locker, and a chi router with the buy route, locked
// or not, and a route that answers 410 without a lock.
func startInstance(rdb redis.UniversalClient, q *quorum, prefix string, c config, locked bool, s shop, lastSale *atomic.Int64) (*instance, error) {
	in := &instance{}
	rdb.AddHook(counter{&in.cmds})
	var engine lockcore.Engine
	closeAll := func() { rdb.Close() }
	if q != nil {
		// Clients of its own of each master, as a process of its own has.
		var ms []redis.UniversalClient
		for _, o := range q.masters {
			m := redis.NewClient(o())
			m.AddHook(counter{&in.cmds})
			ms = append(ms, m)
		}
		closeAll = func() {
			rdb.Close()
			for _, m := range ms {
				m.Close()
			}
		}
		e, err := quorumengine.New(ms, quorumengine.Options{Prefix: prefix + "lock:"})
		if err != nil {
			closeAll()
			return nil, err
		}
		engine = e
	} else {
		e, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix + "lock:"})
		if err != nil {
			rdb.Close()
			return nil, err
		}
		engine, in.gates = e, e
	}
	locker := lock.FromEngine(engine)

	r := chi.NewRouter()
	var turn atomic.Uint32 // the part an unlocked buyer starts at
	buy := func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		io.Copy(io.Discard, r.Body) // who the buyer is, for a real shop
		part := 0
		switch seg, ok := lock.Slot(ctx); {
		case ok:
			part = seg
		case len(s.stock) > 1: // unlocked: the first part with stock, as read
			start := int(turn.Add(1))
			for j := range s.stock {
				part = (start + j) % len(s.stock)
				if n, err := rdb.Get(ctx, s.stock[part]).Int64(); err == nil && n > 0 {
					break
				}
			}
		}
		stockKey := s.stock[part]
		stock, err := rdb.Get(ctx, stockKey).Int64() // read …
		if err != nil {
			http.Error(w, "stock unavailable", http.StatusInternalServerError)
			return
		}
		for stock <= 0 {
			if _, segmented := lock.Slot(ctx); !segmented {
				if locked {
					_ = lock.SoldOut(ctx, 0) // every instance answers 410 from now on
				}
				http.Error(w, "sold out", http.StatusGone)
				return
			}
			// This part is sold: the request moves to another, in place,
			// or answers NextSegment's error (410 when none is left, 409
			// when the others stay busy).
			if err := lock.NextSegment(ctx); err != nil {
				middleware.Error(w, r, err)
				return
			}
			part, _ = lock.Slot(ctx)
			stockKey = s.stock[part]
			if stock, err = rdb.Get(ctx, stockKey).Int64(); err != nil {
				http.Error(w, "stock unavailable", http.StatusInternalServerError)
				return
			}
		}
		time.Sleep(c.payment)                                                    // … take payment …
		if err := rdb.Set(ctx, stockKey, stock-1, time.Hour).Err(); err != nil { // … write back
			http.Error(w, "stock unavailable", http.StatusInternalServerError)
			return
		}
		rdb.Incr(ctx, s.sold)
		now := time.Now().UnixNano()
		for last := lastSale.Load(); now > last && !lastSale.CompareAndSwap(last, now); last = lastSale.Load() {
		}
		fmt.Fprintln(w, "bought")
	}
	if locked {
		policy := []lock.Policy{lock.FailFast()}
		if c.policy == "wait" {
			policy[0] = lock.Wait(c.wait)
		}
		if c.segments > 0 {
			policy = append(policy, lock.Segments(c.segments))
		}
		r.With(locker.ByParam("productID", policy...)).Post("/products/{productID}/buy", buy)
	} else {
		r.Post("/products/{productID}/buy", buy)
	}
	r.Post("/products/{productID}/gone", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "sold out", http.StatusGone)
	})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		engine.Close()
		closeAll()
		return nil, err
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lis)
	in.url = "http://" + lis.Addr().String()
	in.stop = func() {
		srv.Close()
		engine.Close()
		closeAll()
	}
	return in, nil
}

// quorum is the independent masters a quorum engine locks on.
type quorum struct {
	desc    string
	masters []func() *redis.Options
	minis   []*miniredis.Miniredis
}

// openQuorum returns the masters REDIS_QUORUM_URLS names (redis:// URLs,
// comma-separated; n, when not 0, must be their number), or else n
// embedded ones.
func openQuorum(n int) (*quorum, error) {
	q := &quorum{}
	if urls := os.Getenv("REDIS_QUORUM_URLS"); urls != "" {
		var addrs []string
		for _, u := range strings.Split(urls, ",") {
			u = strings.TrimSpace(u)
			o, err := redis.ParseURL(u)
			if err != nil {
				return nil, fmt.Errorf("REDIS_QUORUM_URLS: %w", err)
			}
			addrs = append(addrs, o.Addr)
			q.masters = append(q.masters, func() *redis.Options { o, _ := redis.ParseURL(u); return o })
		}
		if n != 0 && n != len(q.masters) {
			return nil, fmt.Errorf("-quorum %d, but REDIS_QUORUM_URLS names %d masters", n, len(q.masters))
		}
		q.desc = fmt.Sprintf("a quorum of %d masters at %s", len(addrs), strings.Join(addrs, ", "))
		return q, nil
	}
	for range n {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // keys expire on the wall clock, as in Redis
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			q.close()
			return nil, fmt.Errorf("embedded master: %w", err)
		}
		q.minis = append(q.minis, m)
		addr := m.Addr()
		q.masters = append(q.masters, func() *redis.Options { return &redis.Options{Addr: addr} })
	}
	q.desc = fmt.Sprintf("a quorum of %d embedded masters; set REDIS_QUORUM_URLS to use real ones", n)
	return q, nil
}

// close stops the embedded masters.
func (q *quorum) close() {
	for _, m := range q.minis {
		m.Close()
	}
}

// sweep deletes every key whose name starts with prefix on each master
// (SCAN with MATCH, then UNLINK), within 10 s.
func (q *quorum) sweep(ctx context.Context, prefix string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	match := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(prefix) + "*"
	var errs []error
	for _, o := range q.masters {
		c := redis.NewClient(o())
		var cursor uint64
		for range 100000 {
			keys, next, err := c.Scan(ctx, cursor, match, 1000).Result()
			if err != nil {
				errs = append(errs, err)
				break
			}
			if len(keys) > 0 {
				if err := c.Unlink(ctx, keys...).Err(); err != nil {
					errs = append(errs, err)
					break
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		c.Close()
	}
	return errors.Join(errs...)
}
