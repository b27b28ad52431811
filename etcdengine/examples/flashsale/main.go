// Command flashsale is a flash sale on the etcd engine: several instances
// of a shop, each with its own etcd client and Locker, and many buyers
// rushing at a few items at once. The buy handler reads the stock, takes
// payment, and writes the stock back — a read-modify-write that oversells
// when two instances interleave. The sale runs twice, without a lock and
// with
//
//	r.Use(locker.ByParam("productID"))
//
// on lock.FromEngine(etcdengine.New(...)), and prints the two side by
// side. It uses the etcd cluster that ETCD_ENDPOINTS names
// (comma-separated), or else one it embeds:
//
//	go run ./examples/flashsale
//	go run ./examples/flashsale -buyers 500 -items 20 -instances 4
package main

import (
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/etcdengine"
)

func main() {
	var c sale
	flag.IntVar(&c.buyers, "buyers", 300, "buyers")
	flag.IntVar(&c.items, "items", 10, "items in stock")
	flag.IntVar(&c.instances, "instances", 3, "shop instances, each with its own etcd client and Locker")
	flag.DurationVar(&c.payment, "payment", 2*time.Millisecond, "time the handler spends between reading and writing the stock")
	flag.Parse()
	endpoints, stop, err := etcd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flashsale:", err)
		os.Exit(1)
	}
	defer stop()
	c.endpoints = endpoints
	for _, locked := range []bool{false, true} {
		r, err := c.run(locked)
		if err != nil {
			fmt.Fprintln(os.Stderr, "flashsale:", err)
			os.Exit(1)
		}
		name := "no lock"
		if locked {
			name = "routelock"
		}
		fmt.Printf("%-9s %4d buyers, %3d items: sold %4d, oversold %4d, refused %4d\n",
			name, c.buyers, c.items, r.sold, max(r.sold-int64(c.items), 0), r.refused)
	}
}

// sale is one sale's configuration.
type sale struct {
	buyers, items, instances int
	payment                  time.Duration
	endpoints                []string
}

// result is what a sale sold.
type result struct{ sold, refused int64 }

// run runs the sale once, with or without the lock, and returns what the
// shops sold: the buyers told "sold" (200), and those refused (410 sold
// out, or the lock's refusals).
func (c sale) run(locked bool) (result, error) {
	var stock atomic.Int64 // the shops' one database row
	stock.Store(int64(c.items))
	prefix := fmt.Sprintf("flashsale/%d/", time.Now().UnixNano())
	var urls []string
	for range c.instances {
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return result{}, err
		}
		defer cli.Close()
		r := chi.NewRouter()
		if locked {
			e, err := etcdengine.New(cli, etcdengine.Options{Prefix: prefix})
			if err != nil {
				return result{}, err
			}
			defer e.Close()
			r.Use(lock.FromEngine(e).ByParam("productID", lock.Wait(30*time.Second)))
		}
		r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
			n := stock.Load() // read
			if n <= 0 {
				http.Error(w, "sold out", http.StatusGone)
				return
			}
			time.Sleep(c.payment) // take payment
			stock.Store(n - 1)    // write: no compare, as a plain UPDATE
			w.WriteHeader(http.StatusOK)
		})
		srv := httptest.NewServer(r)
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	var sold, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range c.buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Post(urls[i%len(urls)]+"/products/42/buy", "", nil)
			if err != nil {
				refused.Add(1)
				return
			}
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				sold.Add(1)
			} else {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	return result{sold: sold.Load(), refused: refused.Load()}, nil
}

// etcd returns the endpoints of ETCD_ENDPOINTS, or of an etcd server it
// starts embedded, on loopback, in a temporary directory, and a function
// that stops what it started.
func etcd() ([]string, func(), error) {
	if env := os.Getenv("ETCD_ENDPOINTS"); env != "" {
		return strings.Split(env, ","), func() {}, nil
	}
	dir, err := os.MkdirTemp("", "flashsale-etcd-")
	if err != nil {
		return nil, nil, err
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client, _ := url.Parse("http://127.0.0.1:0")
	peer, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls, cfg.ListenPeerUrls = []url.URL{*client}, []url.URL{*peer}
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		srv.Close()
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("the embedded etcd server did not start within 30s")
	}
	stop := func() {
		srv.Close()
		os.RemoveAll(dir)
	}
	addr := srv.Clients[0].Addr().String()
	return []string{"http://" + addr}, stop, nil
}
