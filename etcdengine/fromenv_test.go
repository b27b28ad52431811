package etcdengine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
)

// TestDefaultOnEtcd: in a program that imports the package, lock.ByParam
// without lock.SetDefault locks on the etcd of ETCD_ENDPOINTS, end to end:
// the handler runs with a fencing token while etcd shows the lock held,
// and a second request meanwhile is refused (409); a malformed
// ETCD_ENDPOINTS stops the route where it is built, without its value.
func TestDefaultOnEtcd(t *testing.T) {
	cli := startEtcd(t)
	for _, v := range []string{"REDIS_URL", "REDIS_CLUSTER_URL", "REDIS_SENTINEL_URL"} {
		t.Setenv(v, "")
	}
	lock.SetDefault(nil)
	t.Cleanup(func() { lock.SetDefault(nil) })

	t.Setenv("ETCD_ENDPOINTS", "myetcd.internal:2379?password=s3cret")
	func() {
		defer func() {
			msg, _ := recover().(string)
			if !strings.Contains(msg, "ETCD_ENDPOINTS") || strings.Contains(msg, "s3cret") || strings.Contains(msg, "myetcd") {
				t.Errorf("a malformed ETCD_ENDPOINTS: building a route panicked with %q, want the variable named, without its value", msg)
			}
		}()
		lock.ByParam("productID")
	}()

	t.Setenv("ETCD_ENDPOINTS", " "+strings.Join(cli.Endpoints(), " , ")+", ")
	op, err := New(cli, Options{}) // the default Prefix, as the helpers' engine
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Close() })
	key, _ := lockcore.NewKey("productID", "42")
	inside, leave := make(chan int64), make(chan struct{})
	r := chi.NewRouter()
	r.With(lock.ByParam("productID", lock.FailFast())).Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) {
		fence, ok := lock.FencingToken(r.Context())
		if !ok {
			fence = -1
		}
		inside <- fence
		<-leave
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	post := func() int {
		resp, err := http.Post(srv.URL+"/products/42/buy", "", nil)
		if err != nil {
			t.Error(err)
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	first := make(chan int, 1)
	go func() { first <- post() }()
	var fence int64
	select {
	case fence = <-inside:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler never ran")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := op.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 1 || info.Fence != fence || fence <= 0 {
		t.Errorf("while the handler runs with fence %d, etcd shows %+v", fence, info)
	}
	if code := post(); code != http.StatusConflict {
		t.Errorf("a second request while the lock is held: %d, want 409", code)
	}
	close(leave)
	if code := <-first; code != http.StatusOK {
		t.Errorf("the locked request: %d, want 200", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := op.Inspect(ctx, key)
		if err == nil && len(info.Holders) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock is still held after the request: %+v, %v", info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
