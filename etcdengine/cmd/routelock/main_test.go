package main

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/etcdengine"
	"github.com/routelock/lock/internal/cli"
	"github.com/routelock/lock/lockcore"
)

// startEtcd starts a one-member embedded etcd server on loopback and
// returns its client URL; it stops when the test ends.
func startEtcd(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	u := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.ListenPeerUrls = []url.URL{u}, []url.URL{u}
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(20 * time.Second):
		t.Fatal("embedded etcd did not start within 20s")
	}
	return "http://" + srv.Clients[0].Addr().String()
}

// command runs the command with env and args.
func command(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errw strings.Builder
	code = cli.Run(t.Context(), args, func(k string) string { return env[k] }, &out, &errw, open)
	return code, out.String(), errw.String()
}

// TestCommandOnEtcd: with ETCD_ENDPOINTS set, ls and inspect show a lock
// an application holds on etcd, with its route and no restart guard line;
// release force-releases it, and the holder's context ends with
// ErrRevoked; gates says the engine has none; ETCD_ENDPOINTS beside
// REDIS_URL is an error naming both, without their values.
func TestCommandOnEtcd(t *testing.T) {
	endpoint := startEtcd(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e, err := etcdengine.New(c, etcdengine.Options{Name: "pod-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	key, _ := lockcore.NewKey("productID", "42")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ls, err := lock.FromEngine(e).Acquire(ctx, key, lock.Policy{Wait: lockcore.FailFast, Route: "POST /products/{productID}/buy"})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ETCD_ENDPOINTS": endpoint}

	code, out, errs := command(t, env, "ls")
	if code != 0 || !strings.Contains(out, "productID:42") || !strings.Contains(out, "pod-a") || strings.Contains(out+errs, "restart guard") {
		t.Errorf("ls: %d\n%s%s", code, out, errs)
	}
	code, out, errs = command(t, env, "inspect", "productID:42")
	if code != 0 || !strings.Contains(out, "POST /products/{productID}/buy") || !strings.Contains(out, "pod-a") || strings.Contains(out+errs, "restart guard") {
		t.Errorf("inspect: %d\n%s%s", code, out, errs)
	}
	code, out, errs = command(t, env, "-json", "inspect", "productID:42")
	if code != 0 || !strings.Contains(out, `"key": "productID:42"`) || strings.Contains(out, "restart_guard_ms") {
		t.Errorf("inspect -json: %d\n%s%s", code, out, errs)
	}
	for _, cmd := range [][]string{{"gates"}, {"open", "productID:42"}} {
		code, out, errs = command(t, env, cmd...)
		if code != 1 || !strings.Contains(errs, "the engine has no gates") || out != "" {
			t.Errorf("%s: %d, %q %q; want 1 and that the engine has no gates", cmd[0], code, out, errs)
		}
	}
	code, out, errs = command(t, env, "release", "productID:42", "-reason", "stuck checkout")
	if code != 0 || !strings.Contains(out, "productID:42") {
		t.Fatalf("release: %d\n%s%s", code, out, errs)
	}
	select {
	case <-ls.Context().Done():
		if cause := context.Cause(ls.Context()); !errors.Is(cause, lockcore.ErrRevoked) {
			t.Errorf("the holder's context ended with %v, want ErrRevoked", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's context did not end after release")
	}
	_ = ls.Release(ctx)
	code, out, errs = command(t, env, "release", "productID:42", "-reason", "again")
	if code != 3 {
		t.Errorf("release of a free lock: %d, want 3\n%s%s", code, out, errs)
	}
	code, out, errs = command(t, env, "inspect", "productID:42")
	if code != 0 || !strings.Contains(out, "stuck checkout") {
		t.Errorf("inspect after release: %d, want the audit record\n%s%s", code, out, errs)
	}

	both := map[string]string{"ETCD_ENDPOINTS": endpoint, "REDIS_URL": "redis://:s3cret@127.0.0.1:6379"}
	code, out, errs = command(t, both, "ls")
	if code != 1 || !strings.Contains(errs, "ETCD_ENDPOINTS and REDIS_URL are both set") || strings.Contains(errs, "s3cret") || strings.Contains(errs, endpoint) {
		t.Errorf("ETCD_ENDPOINTS and REDIS_URL: %d %q %q", code, out, errs)
	}
	code, _, errs = command(t, map[string]string{"ETCD_ENDPOINTS": "http://user:s3cret@127.0.0.1:2379"}, "ls")
	if code != 1 || !strings.Contains(errs, "ETCD_ENDPOINTS") || strings.Contains(errs, "s3cret") {
		t.Errorf("ETCD_ENDPOINTS with credentials: %d %q", code, errs)
	}
}

// TestResultsCommandOnEtcd: with ETCD_ENDPOINTS set, results lists a
// result the etcd engine keeps (its key, as -json too), and drop drops it:
// Result finds none after, and a second drop exits 3.
func TestResultsCommandOnEtcd(t *testing.T) {
	endpoint := startEtcd(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e, err := etcdengine.New(c, etcdengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	key, _ := lockcore.NewKey("orderID", "9")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := e.Take(ctx, lockcore.Request{Key: key, Token: "the-holder", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Keep(ctx, key, h, []byte("201 created"), time.Hour); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ETCD_ENDPOINTS": endpoint}
	code, out, errs := command(t, env, "results")
	if code != 0 || !strings.Contains(out, "orderID:9") || strings.Contains(out, "201 created") {
		t.Errorf("results: %d\n%s%s", code, out, errs)
	}
	code, out, errs = command(t, env, "-json", "results", "orderID:")
	if code != 0 || !strings.Contains(out, `"orderID:9"`) {
		t.Errorf("results -json: %d\n%s%s", code, out, errs)
	}
	code, out, errs = command(t, env, "drop", "orderID:9")
	if code != 0 || !strings.Contains(out, "orderID:9") {
		t.Fatalf("drop: %d\n%s%s", code, out, errs)
	}
	if _, ok, err := e.Result(ctx, key); ok || err != nil {
		t.Errorf("Result after drop: %v, %v; want none", ok, err)
	}
	if code, out, errs = command(t, env, "drop", "orderID:9"); code != 3 {
		t.Errorf("drop again: %d, want 3\n%s%s", code, out, errs)
	}
}
