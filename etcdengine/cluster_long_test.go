//go:build long

package etcdengine

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// cluster is a three-member etcd cluster, embedded, on loopback, whose
// members can be stopped and restarted on their data, and partitioned:
// every member's peer traffic goes through a proxy in front of its peer
// URL (the URL it advertises), and every client's traffic to a member
// through a proxy of the client's own, so that a member can be cut off
// from the others and from every client, and one client from every
// member.
type cluster struct {
	t       testing.TB
	token   string
	initial string // InitialCluster
	members []*member
	admin   *clientv3.Client // straight to the members, for Status

	mu      sync.Mutex
	clients []*clusterClient
}

// member is one member of a cluster.
type member struct {
	name string
	dir  string
	peer *linkProxy // in front of its peer URL; advertised
	// Its own listeners, the proxies' targets; fixed at the first start,
	// so that a restart listens where the proxies forward.
	peerAddr, clientAddr string
	id                   string // its member id, as etcd's raft transport spells it

	mu  sync.Mutex
	srv *embed.Etcd // nil while stopped
}

// clusterClient is a client whose connection to each member goes through
// a proxy of its own.
type clusterClient struct {
	*clientv3.Client
	links []*linkProxy // by member
}

// startCluster starts a three-member cluster and waits until it has a
// leader; it stops when the test ends, after every client made with
// client (their cleanups run first).
func startCluster(t testing.TB) *cluster {
	t.Helper()
	c := &cluster{t: t, token: "routelock-" + newInstance()}
	var initial []string
	for i := range 3 {
		m := &member{name: "m" + strconv.Itoa(i), dir: t.TempDir(), peer: newLinkProxy(t)}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"=http://"+m.peer.addr)
	}
	c.initial = strings.Join(initial, ",")
	t.Cleanup(c.close)
	var wg sync.WaitGroup
	errs := make([]error, len(c.members))
	for i, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.start(m)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var eps []string
	for _, m := range c.members {
		eps = append(eps, "http://"+m.clientAddr)
	}
	admin, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	c.admin = admin
	if err := c.waitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

// config is m's configuration: on loopback, without fsync, quiet.
func (c *cluster) config(m *member) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	peer, client := "127.0.0.1:0", "127.0.0.1:0"
	if m.peerAddr != "" {
		peer, client = m.peerAddr, m.clientAddr
	}
	cfg.ListenPeerUrls = []url.URL{{Scheme: "http", Host: peer}}
	cfg.ListenClientUrls = []url.URL{{Scheme: "http", Host: client}}
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: m.peer.addr}}
	// Clients are given their endpoints (their proxies); this is only
	// what the member says of itself.
	cfg.AdvertiseClientUrls = []url.URL{{Scheme: "http", Host: client}}
	cfg.InitialCluster = c.initial
	cfg.InitialClusterToken = c.token
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored once it has data
	return cfg
}

// start starts m, on its data dir, and returns once it serves; the first
// time, it learns its listeners' addresses and points the proxies at them.
func (c *cluster) start(m *member) error {
	cfg := c.config(m)
	first := m.peerAddr == ""
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start %s: %w", m.name, err)
	}
	if first {
		m.peerAddr = srv.Peers[0].Addr().String()
		m.clientAddr = srv.Clients[0].Addr().String()
		m.id = srv.Server.MemberID().String()
		m.peer.setTarget(m.peerAddr)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		srv.Close()
		return fmt.Errorf("etcd member %s did not start within 30s", m.name)
	}
	m.mu.Lock()
	m.srv = srv
	m.mu.Unlock()
	return nil
}

// stop stops m (Close), as a process that was killed; its data stays.
func (m *member) stop() {
	m.mu.Lock()
	srv := m.srv
	m.srv = nil
	m.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// restart starts m again on its data.
func (c *cluster) restart(m *member) error { return c.start(m) }

// client returns a client given every member's endpoint (through proxies
// of its own); it is closed when the test ends, before the cluster.
func (c *cluster) client() *clusterClient {
	c.t.Helper()
	cc := &clusterClient{}
	var eps []string
	for _, m := range c.members {
		p := newLinkProxy(c.t)
		p.setTarget(m.clientAddr)
		cc.links = append(cc.links, p)
		eps = append(eps, "http://"+p.addr)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	cc.Client = cli
	c.t.Cleanup(func() { _ = cli.Close() })
	c.mu.Lock()
	c.clients = append(c.clients, cc)
	c.mu.Unlock()
	return cc
}

// cutClient cuts (on) or heals (off) every connection of cc to the
// cluster: a process that nothing reaches.
func (cc *clusterClient) cutClient(on bool) {
	for _, p := range cc.links {
		p.cut(on)
	}
}

// partition cuts m off (on) from the other members and from every client,
// or heals it (off): its peer proxy and every client's proxy to it close
// their connections and refuse new ones, and the other members' peer
// proxies close the connections of m's raft transport (known by the
// member id it sends).
func (c *cluster) partition(m *member, on bool) {
	c.mu.Lock()
	clients := c.clients
	c.mu.Unlock()
	i := c.index(m)
	for _, cc := range clients {
		cc.links[i].cut(on)
	}
	m.peer.cut(on)
	for _, o := range c.members {
		if o != m {
			o.peer.cutFrom(m.id, on)
		}
	}
}

func (c *cluster) index(m *member) int {
	for i, o := range c.members {
		if o == m {
			return i
		}
	}
	panic("not a member")
}

// status asks m (directly, not through a proxy) for its status.
func (c *cluster) status(ctx context.Context, m *member) (*clientv3.StatusResponse, error) {
	return c.admin.Status(ctx, "http://"+m.clientAddr)
}

// leader returns the member that the running members agree leads, or nil.
func (c *cluster) leader(ctx context.Context) *member {
	var lead uint64
	for _, m := range c.members {
		m.mu.Lock()
		up := m.srv != nil
		m.mu.Unlock()
		if !up {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.status(sctx, m)
		cancel()
		if err != nil || st.Leader == 0 || (lead != 0 && st.Leader != lead) {
			return nil
		}
		lead = st.Leader
	}
	for _, m := range c.members {
		m.mu.Lock()
		ok := m.srv != nil && uint64(m.srv.Server.MemberID()) == lead
		m.mu.Unlock()
		if ok {
			return m
		}
	}
	return nil
}

// waitHealthy polls, up to d, until every member runs and all agree on a
// leader.
func (c *cluster) waitHealthy(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		all := true
		for _, m := range c.members {
			m.mu.Lock()
			all = all && m.srv != nil
			m.mu.Unlock()
		}
		if all && c.leader(ctx) != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster did not agree on a leader within %v", d)
		case <-tick.C:
		}
	}
}

// close stops the admin client, then every member.
func (c *cluster) close() {
	if c.admin != nil {
		_ = c.admin.Close()
	}
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.stop()
		}()
	}
	wg.Wait()
}

// linkProxy forwards TCP connections on a loopback port to a target, and
// can cut them: all of them (cut), or those that etcd's raft transport of
// one member opens (cutFrom), known by the X-Server-From header of their
// requests. A cut closes the connections (RST) and closes new ones at
// once: a peer or client sees an error and tries again, never a stream
// missing bytes in the middle.
type linkProxy struct {
	ln   net.Listener
	addr string
	wg   sync.WaitGroup

	mu     sync.Mutex
	target string
	all    bool
	from   map[string]bool
	conns  map[*link]struct{}
	closed bool
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	from           string // the raft transport's member id, once seen
}

// newLinkProxy listens on a free loopback port; it forwards nothing until
// setTarget, and stops when the test ends.
func newLinkProxy(t testing.TB) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, addr: ln.Addr().String(), from: map[string]bool{}, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *linkProxy) setTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
}

// cut cuts every connection (on) or lets them through again (off; it
// also heals cutFrom).
func (p *linkProxy) cut(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all = on
	if !on {
		clear(p.from)
		return
	}
	for l := range p.conns {
		p.drop(l)
	}
}

// cutFrom cuts (on) or heals (off) the connections of member id's raft
// transport.
func (p *linkProxy) cutFrom(id string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !on {
		delete(p.from, id)
		return
	}
	p.from[id] = true
	for l := range p.conns {
		if l.from == id {
			p.drop(l)
		}
	}
}

// drop resets l; p.mu is held.
func (p *linkProxy) drop(l *link) {
	for _, c := range []net.Conn{l.client, l.server} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	delete(p.conns, l)
}

func (p *linkProxy) close() {
	p.mu.Lock()
	p.closed = true
	for l := range p.conns {
		p.drop(l)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

func (p *linkProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target, refuse := p.target, p.all || p.closed || p.target == ""
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c, target)
	}
}

func (p *linkProxy) serve(c net.Conn, target string) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", target, time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	if p.all || p.closed {
		p.mu.Unlock()
		_ = c.Close()
		_ = s.Close()
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.pipe(l, s, c, false)
	}()
	p.pipe(l, c, s, true)
	<-done
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// fromHeader is the header by which etcd's raft transport names the
// member that sends.
var fromHeader = []byte("X-Server-From: ")

// pipe copies src to dst until either fails, then closes both. On the
// way to the target (up), it reads the sender's member id from the
// requests, and drops the link if that member is cut.
func (p *linkProxy) pipe(l *link, dst, src net.Conn, up bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && up {
			if i := bytes.Index(buf[:n], fromHeader); i >= 0 {
				rest := buf[i+len(fromHeader) : n]
				if j := bytes.IndexByte(rest, '\r'); j > 0 {
					p.mu.Lock()
					l.from = string(rest[:j])
					if p.from[l.from] {
						p.drop(l)
						p.mu.Unlock()
						return
					}
					p.mu.Unlock()
				}
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
