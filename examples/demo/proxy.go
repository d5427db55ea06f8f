package main

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// pauseProxy forwards TCP connections from loopback ports to servers, and
// can be paused: while paused it accepts and reads as usual but forwards
// nothing in either direction, the way a process frozen by a long garbage
// collection pause goes silent. The worker behind it keeps running, but none
// of its keepalives reach the server, so the server expires its session.
//
// It is safe for concurrent use.
type pauseProxy struct {
	mu      sync.Mutex
	paused  bool
	closed  bool
	routes  map[string]string // server address -> local listener address
	lns     []net.Listener
	conns   map[net.Conn]struct{}
	handles sync.WaitGroup
}

// newPauseProxy listens on one loopback port per server address.
func newPauseProxy(servers []string) (*pauseProxy, error) {
	p := &pauseProxy{routes: map[string]string{}, conns: map[net.Conn]struct{}{}}
	for _, s := range servers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("proxy: listen: %w", err)
		}
		p.lns = append(p.lns, ln)
		p.routes[s] = ln.Addr().String()
		p.handles.Add(1)
		go p.accept(ln, s)
	}
	return p, nil
}

// Addrs returns the local address standing in for each server, in order.
func (p *pauseProxy) Addrs(servers []string) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = p.routes[s]
	}
	return out
}

// Dial connects to server through the proxy. Its signature is that of
// zk.Dialer.
func (p *pauseProxy) Dial(network, server string, timeout time.Duration) (net.Conn, error) {
	local, ok := p.routes[server]
	if !ok {
		return nil, fmt.Errorf("proxy: no route to %s", server)
	}
	return net.DialTimeout(network, local, timeout)
}

// Pause stops forwarding.
func (p *pauseProxy) Pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Resume forwards again. Connections that lost bytes while paused are
// closed, so that clients reconnect cleanly instead of reading a stream
// with a hole in it.
func (p *pauseProxy) Resume() {
	p.mu.Lock()
	p.paused = false
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *pauseProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for _, ln := range p.lns {
		ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.handles.Wait()
}

func (p *pauseProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *pauseProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *pauseProxy) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

func (p *pauseProxy) accept(ln net.Listener, server string) {
	defer p.handles.Done()
	for {
		client, err := ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			return
		}
		p.handles.Add(1)
		go p.serve(client, server)
	}
}

// serve forwards one connection until either side closes it.
func (p *pauseProxy) serve(client net.Conn, server string) {
	defer p.handles.Done()
	defer p.untrack(client)
	upstream, err := net.DialTimeout("tcp", server, 5*time.Second)
	if err != nil || !p.track(upstream) {
		return
	}
	defer p.untrack(upstream)
	done := make(chan struct{}, 2)
	go func() { p.pipe(upstream, client); done <- struct{}{} }()
	go func() { p.pipe(client, upstream); done <- struct{}{} }()
	<-done
	// One direction ended: close both so the other ends too.
	client.Close()
	upstream.Close()
	<-done
}

// pipe copies src to dst, dropping what it reads while the proxy is paused.
func (p *pauseProxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isPaused() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
