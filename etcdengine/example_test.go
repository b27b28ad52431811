package etcdengine_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/etcdengine"
)

// A route locked on etcd, as on Redis: only the engine given to
// lock.FromEngine changes.
func Example() {
	endpoint, stop, err := etcdengine.StartEmbedded() // an etcd server for the example
	if err != nil {
		panic(err)
	}
	defer stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	r := chi.NewRouter()
	buy := func(w http.ResponseWriter, r *http.Request) {
		fence, _ := lock.FencingToken(r.Context())
		fmt.Fprintf(w, "bought under fence > 0: %v", fence > 0)
	}

	// readme:begin
	e, err := etcdengine.New(cli, etcdengine.Options{}) // cli: a go.etcd.io/etcd/client/v3 client
	if err != nil {
		log.Fatal(err)
	}
	locker := lock.FromEngine(e)
	r.With(locker.ByParam("productID")).Post("/products/{productID}/buy", buy)
	// readme:end
	defer e.Close()

	srv := httptest.NewServer(r)
	defer srv.Close()
	res, err := http.Post(srv.URL+"/products/42/buy", "", nil)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.StatusCode, string(body))
	// Output: 200 bought under fence > 0: true
}
