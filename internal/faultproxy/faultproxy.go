// Package faultproxy is a TCP proxy on loopback for fault-injection tests:
// it forwards connections to a target and, on command, delays traffic,
// blackholes it (reads and drops it, keeping connections open), resets
// every connection, closes new ones once accepted, stops listening (the
// kernel then refuses connections, as to a Redis that is down), loses the
// reply to a chosen command after the command ran, or deafens
// subscriptions.
package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards connections from Addr to a target.
type Proxy struct {
	// Addr is the loopback address the proxy listens on.
	Addr string

	target    string
	lnMu      sync.Mutex
	ln        net.Listener // nil while Down
	latency   atomic.Int64 // added to each chunk, each way
	blackhole atomic.Bool
	deaf      atomic.Bool
	refuse    atomic.Bool
	resets    atomic.Int64
	lost      atomic.Int64

	loseMu    sync.Mutex
	loseMatch []byte // LoseReplyTo's match; nil when disarmed
	loseLeft  int    // how many more replies to lose
	afterLoss func() // AfterLoss's hook

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
	done  chan struct{}
}

// Start starts a proxy to target on a free loopback port; it stops when the
// test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept(ln)
	t.Cleanup(p.Close)
	return p
}

// SetLatency delays every chunk of data by d in each direction.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Blackhole drops all traffic both ways while on, keeping connections
// open, as a network partition does: the client sees timeouts, not errors.
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// DeafenSubscriptions drops everything Redis sends on connections that
// subscribed (SUBSCRIBE or PSUBSCRIBE) while on, keeping them open, while
// other connections work: published messages are lost on the way, and so
// are the replies to the subscriber's pings.
func (p *Proxy) DeafenSubscriptions(on bool) { p.deaf.Store(on) }

// Refuse closes new connections at once while on: the client's connect
// succeeds, and its first read or write fails. For connections refused by
// the kernel, as by a host where Redis is not running, see Down.
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// Down models a Redis that is not running (stopped, crashed, restarting):
// while on, the proxy does not listen on Addr, so that the kernel refuses
// new connections at once (ECONNREFUSED), and the connections open when it
// went down are reset. Down(false) listens on Addr again; it fails if
// another socket took the port meanwhile.
func (p *Proxy) Down(on bool) error {
	p.lnMu.Lock()
	defer p.lnMu.Unlock()
	if on {
		if p.ln != nil {
			_ = p.ln.Close()
			p.ln = nil
		}
		p.ResetAll()
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return err
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// Heal turns every fault off. Panics if the proxy was Down and cannot
// listen on Addr again.
func (p *Proxy) Heal() {
	p.SetLatency(0)
	p.Blackhole(false)
	p.Refuse(false)
	p.DeafenSubscriptions(false)
	if err := p.Down(false); err != nil {
		panic("faultproxy: Heal: " + err.Error())
	}
}

// ResetAll resets every open connection (RST, not FIN) and returns how many.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
		delete(p.conns, c)
		n++
	}
	p.resets.Add(int64(n))
	return n
}

// Resets returns how many connections ResetAll has reset so far.
func (p *Proxy) Resets() int64 { return p.resets.Load() }

// LoseReplyTo arms the fault "the reply is lost after the command ran": the
// next n times a chunk from a client to the target contains match, the
// chunk is forwarded, so the command runs, and the reply coming back on that
// connection is dropped and the client's connection reset (RST) instead, as
// when a connection breaks after the request went out. A client that
// retries commands on a broken connection (go-redis does, up to its
// MaxRetries, 3 by default) sends the command again on a new connection, so
// it runs twice.
//
// A chunk is what one read returns: a match split across two reads is not
// seen, which does not happen to a command written at once on loopback.
// Match something only the command in question carries, such as a script's
// SHA1 for EVALSHA or a unique argument. A later call replaces the arming;
// n <= 0 disarms. Blackhole takes precedence: a blackholed chunk is dropped
// and does not count.
func (p *Proxy) LoseReplyTo(match []byte, n int) {
	p.loseMu.Lock()
	defer p.loseMu.Unlock()
	if n <= 0 || len(match) == 0 {
		p.loseMatch, p.loseLeft = nil, 0
		return
	}
	p.loseMatch, p.loseLeft = bytes.Clone(match), n
}

// AfterLoss makes f run each time a reply is lost (LoseReplyTo), after the
// command ran and before the client's connection is reset, so that the
// client's next try meets whatever f changed: a fault that follows the
// loss (Refuse), or another client's command that runs between the two
// tries. nil removes it.
func (p *Proxy) AfterLoss(f func()) {
	p.loseMu.Lock()
	defer p.loseMu.Unlock()
	p.afterLoss = f
}

// LostReplies returns how many replies LoseReplyTo has lost so far.
func (p *Proxy) LostReplies() int64 { return p.lost.Load() }

// armed reports whether chunk, on its way to the target, is one whose
// reply is to be lost, and counts it if so.
func (p *Proxy) armed(chunk []byte) bool {
	p.loseMu.Lock()
	defer p.loseMu.Unlock()
	if p.loseLeft <= 0 || !bytes.Contains(chunk, p.loseMatch) {
		return false
	}
	p.loseLeft--
	if p.loseLeft == 0 {
		p.loseMatch = nil
	}
	return true
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.done)
	p.lnMu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
	}
	p.lnMu.Unlock()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		// A connection accepted just before Down closed ln is not served:
		// Down holds lnMu while it closes ln and resets what is tracked, so
		// a connection is either tracked before (and reset) or sees that ln
		// is no longer the listener.
		p.lnMu.Lock()
		serve := p.ln == ln && !p.refuse.Load() && p.track(c)
		p.lnMu.Unlock()
		if !serve {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		p.untrack(client)
		return
	}
	if !p.track(server) {
		p.untrack(client)
		_ = server.Close()
		return
	}
	var st connState
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client, &st, true) }()
	go func() { defer wg.Done(); p.pipe(client, server, &st, false) }()
	wg.Wait()
}

// connState is what the two directions of one proxied connection share.
type connState struct {
	// lose is set by the client's direction when a request matched
	// LoseReplyTo, before the request is forwarded, so the server's
	// direction sees it when the reply comes.
	lose atomic.Bool
	// sub is set once the client sent a SUBSCRIBE or PSUBSCRIBE.
	sub atomic.Bool
}

// pipe copies from src to dst until either fails, applying the faults;
// then it closes both, so that the other direction ends too. On the
// client's direction (toServer) a chunk that matches LoseReplyTo sets
// st.lose; on the server's, a chunk read while st.lose is set is dropped and
// the client (dst) is reset, and a chunk for a subscriber is dropped while
// subscriptions are deafened.
func (p *Proxy) pipe(dst, src net.Conn, st *connState, toServer bool) {
	defer p.untrack(dst)
	defer p.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !toServer && st.lose.Load() {
			// The reply to a request whose reply is to be lost: drop it and
			// reset the client's connection.
			p.loseMu.Lock()
			f := p.afterLoss
			p.loseMu.Unlock()
			if f != nil {
				f()
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			p.lost.Add(1)
			return
		}
		deaf := !toServer && st.sub.Load() && p.deaf.Load()
		if n > 0 && !p.blackhole.Load() && !deaf {
			if toServer {
				if p.armed(buf[:n]) {
					st.lose.Store(true)
				}
				if bytes.Contains(bytes.ToLower(buf[:n]), []byte("subscribe")) {
					st.sub.Store(true)
				}
			}
			if d := time.Duration(p.latency.Load()); d > 0 {
				select {
				case <-time.After(d): // the injected latency
				case <-p.done:
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF, reset or closed: the connection is over
			return
		}
	}
}
