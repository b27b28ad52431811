package faultproxy

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// echo starts a loopback server that writes back what it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestDownEndsConnectionsBeingAccepted checks that no connection outlives
// Down, including one the proxy accepted just before it went down and was
// still connecting to the target: each of 300 connections is dialled right
// before Down, and none may carry data afterwards.
func TestDownEndsConnectionsBeingAccepted(t *testing.T) {
	p := Start(t, echo(t))
	for i := range 300 {
		if err := p.Down(false); err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Down(true); err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write([]byte("ping"))
		got := make([]byte, 4)
		n, err := io.ReadFull(c, got)
		_ = c.Close()
		if err == nil || bytes.Equal(got[:n], []byte("ping")) {
			t.Fatalf("connection %d, dialled before Down, carried %q after it (err %v); want it ended", i, got[:n], err)
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("connection %d, dialled before Down, neither answered nor ended within 2s", i)
		}
	}
}

// TestDownThenUp checks that a proxy that comes back up forwards again.
func TestDownThenUp(t *testing.T) {
	p := Start(t, echo(t))
	if err := p.Down(true); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", p.Addr); err == nil {
		_ = c.Close()
		t.Fatal("dialled a proxy that is down; want the connection refused")
	}
	if err := p.Down(false); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("after Down(false): read %q, %v; want ping", got, err)
	}
}
