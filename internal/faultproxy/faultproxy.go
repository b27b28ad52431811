// Package faultproxy is a TCP proxy on loopback for fault-injection tests:
// it forwards connections to a target and, on command, delays traffic,
// blackholes it (reads and drops it, keeping connections open), resets
// every connection, or refuses new ones.
package faultproxy

import (
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
	ln        net.Listener
	latency   atomic.Int64 // added to each chunk, each way
	blackhole atomic.Bool
	refuse    atomic.Bool
	resets    atomic.Int64

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
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// SetLatency delays every chunk of data by d in each direction.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Blackhole drops all traffic both ways while on, keeping connections
// open, as a network partition does: the client sees timeouts, not errors.
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// Refuse closes new connections at once while on.
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// Heal turns every fault off.
func (p *Proxy) Heal() {
	p.SetLatency(0)
	p.Blackhole(false)
	p.Refuse(false)
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

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.done)
	_ = p.ln.Close()
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

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
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
		_ = client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client) }()
	go func() { defer wg.Done(); p.pipe(client, server) }()
	wg.Wait()
}

// pipe copies from src to dst until either fails, applying the faults;
// then it closes both, so that the other direction ends too.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.untrack(dst)
	defer p.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.blackhole.Load() {
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
