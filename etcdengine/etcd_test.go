package etcdengine

import (
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startEmbedded starts a one-member etcd server, embedded, on loopback
// ports of its own and a temporary directory, without fsync, and returns
// its client URL and a function that stops it and removes the directory.
func startEmbedded() (endpoint string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "etcdengine-")
	if err != nil {
		return "", nil, err
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client, peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}, url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.ListenPeerUrls = []url.URL{client}, []url.URL{peer}
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop = func() {
		srv.Close()
		os.RemoveAll(dir)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(20 * time.Second):
		stop()
		return "", nil, fmt.Errorf("embedded etcd did not start within 20s")
	}
	return "http://" + srv.Clients[0].Addr().String(), stop, nil
}

// startEtcd starts an embedded etcd server (startEmbedded) and returns a
// client on it; both are closed when the test ends, the client first.
func startEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	endpoint, stop, err := startEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.Close()
		stop()
	})
	return cli
}
