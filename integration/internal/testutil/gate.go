package testutil

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// Gate cuts one client off from every server on demand, the way a network
// partition around the client does: Cut closes the client's connections
// and refuses new ones until Heal. Give the client Gate.Dial (etcd: through
// grpc.WithContextDialer; ZooKeeper: Gate.ZKDialer) and nothing else to
// connect with. A Gate is safe for concurrent use; its zero value is open.
type Gate struct {
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// errGateCut is what a dial through a cut Gate returns.
var errGateCut = errors.New("testutil: gate cut: connection refused")

// Dial connects to addr unless the Gate is cut.
func (g *Gate) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	cut := g.cut
	g.mu.Unlock()
	if cut {
		return nil, errGateCut
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cut {
		_ = c.Close()
		return nil, errGateCut
	}
	if g.conns == nil {
		g.conns = map[net.Conn]struct{}{}
	}
	gc := &gateConn{Conn: c, g: g}
	g.conns[gc] = struct{}{}
	return gc, nil
}

// Cut closes the connections made through g and refuses new ones.
func (g *Gate) Cut() {
	g.mu.Lock()
	g.cut = true
	conns := g.conns
	g.conns = nil
	g.mu.Unlock()
	for c := range conns {
		_ = c.(*gateConn).Conn.Close()
	}
}

// Heal lets the client connect again.
func (g *Gate) Heal() {
	g.mu.Lock()
	g.cut = false
	g.mu.Unlock()
}

type gateConn struct {
	net.Conn
	g *Gate
}

func (c *gateConn) Close() error {
	c.g.mu.Lock()
	delete(c.g.conns, c)
	c.g.mu.Unlock()
	return c.Conn.Close()
}

// ZKDialer returns a go-zookeeper dialer that connects through g.
func (g *Gate) ZKDialer() func(network, addr string, timeout time.Duration) (net.Conn, error) {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return g.Dial(ctx, network, addr)
	}
}
