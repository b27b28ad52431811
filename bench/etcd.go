package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/routelock/lock/etcdengine"
	"github.com/routelock/lock/internal/lifecycle"
)

// etcdServers is an etcd cluster of members members, each an embedded
// etcd server in a process of its own (a worker of this executable:
// EtcdMember), on loopback, its data in a temporary directory of the
// machine's disk, with fsync or without.
func etcdServers(members int, fsync bool) *Servers {
	v := fmt.Sprintf("LOCKBENCH_ETCD%d", members)
	if fsync {
		v += "_FSYNC"
	}
	return &Servers{Var: v, start: func() (string, func(), error) { return startEtcd(members, fsync) }}
}

// The etcd set-ups measured, one each per process.
var (
	etcd1      = etcdServers(1, false)
	etcd1Fsync = etcdServers(1, true)
	etcd3      = etcdServers(3, false)
	etcd3Fsync = etcdServers(3, true)
)

// memberVar, in a process's environment, makes it an etcd member
// (EtcdMember): its value is the member's configuration as JSON.
const memberVar = "LOCKBENCH_ETCD_MEMBER"

type memberConfig struct {
	Name, Dir, Client, Peer, Cluster string
	Fsync                            bool
}

// EtcdMember runs this process as an etcd member, until its standard
// input closes, when the environment asks it to (a process Servers
// started), and reports whether it did. Call it first in main and
// TestMain.
func EtcdMember() bool {
	raw := os.Getenv(memberVar)
	if raw == "" {
		return false
	}
	if err := runMember(raw); err != nil {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		os.Exit(1)
	}
	return true
}

func runMember(raw string) error {
	var c memberConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return err
	}
	cu, err := url.Parse(c.Client)
	if err != nil {
		return err
	}
	pu, err := url.Parse(c.Peer)
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = c.Name, c.Dir
	cfg.UnsafeNoFsync = !c.Fsync
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = c.Cluster
	cfg.InitialClusterToken = "lockbench"
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Println("started")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return nil
}

// startEtcd starts an etcd cluster of members members (etcdServers) and
// returns its client URLs, comma-separated, once it answers.
func startEtcd(members int, fsync bool) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "lockbench-etcd-")
	if err != nil {
		return "", nil, err
	}
	ports, err := freePorts(2 * members)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	var clients, cluster []string
	for i := range members {
		clients = append(clients, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]))
		cluster = append(cluster, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i+1]))
	}
	type member struct {
		cmd *exec.Cmd
		in  io.WriteCloser
	}
	var ms []member
	stop := func() {
		for _, m := range ms {
			_ = m.in.Close()
		}
		for _, m := range ms {
			done := make(chan struct{})
			go func() { _ = m.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = m.cmd.Process.Kill()
				<-done
			}
		}
		_ = os.RemoveAll(dir)
	}
	for i := range members {
		c := memberConfig{Name: fmt.Sprintf("m%d", i), Dir: fmt.Sprintf("%s/m%d", dir, i), Client: clients[i],
			Peer: strings.TrimPrefix(cluster[i], fmt.Sprintf("m%d=", i)), Cluster: strings.Join(cluster, ","), Fsync: fsync}
		raw, _ := json.Marshal(c)
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), memberVar+"="+string(raw))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			stop()
			return "", nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			stop()
			return "", nil, err
		}
		if err := cmd.Start(); err != nil {
			stop()
			return "", nil, err
		}
		ms = append(ms, member{cmd, in})
		go func() { _, _ = io.Copy(io.Discard, bufio.NewReader(out)) }()
	}
	if err := awaitEtcd(clients, 60*time.Second); err != nil {
		stop()
		return "", nil, err
	}
	return strings.Join(clients, ","), stop, nil
}

// awaitEtcd waits until the cluster at endpoints serves a linearizable
// read, for up to bound.
func awaitEtcd(endpoints []string, bound time.Duration) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(bound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "lockbench/ready")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd at %v did not answer within %v: %w", endpoints, bound, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a server that is starting
	}
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// newEtcd is routelock's etcd engine on the cluster of s, counting the
// unary requests its client sends (watches and keep-alive streams are
// not counted) in cmds.
func newEtcd(s *Servers, cmds *atomic.Int64) (Mutexer, error) {
	where, err := s.Up()
	if err != nil {
		return nil, err
	}
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		cmds.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(where, ","), DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)}})
	if err != nil {
		return nil, err
	}
	e, err := etcdengine.New(cli, etcdengine.Options{Prefix: "bench/rl/", TTL: TTL})
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	return &routelock{close: func() { _ = e.Close(); _ = cli.Close() }, lk: lifecycle.Serve(e, nil)}, nil
}
