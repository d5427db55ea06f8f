package benchtest

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// counters counts what the clients of one measurement send and receive,
// on the wire as the client library sees it. Session upkeep (etcd lease
// keepalives, ZooKeeper pings) is counted apart from requests, since its
// rate depends on the TTL and not on the lock traffic.
type counters struct {
	requests   atomic.Int64 // requests sent: unary RPCs and watch stream requests; ZooKeeper requests
	events     atomic.Int64 // watch events delivered to the clients
	keepalives atomic.Int64 // lease keepalives (etcd) or pings (ZooKeeper)
	// lateWatches counts etcd watches created with a start revision at or
	// behind the revision the server reported when it created them. The
	// server puts such a watch among its unsynced watchers, which it
	// serves only in its periodic resync (every 100ms in etcd 3.6,
	// watchResyncPeriod), so an event the watch waits for can be late by
	// up to that period. Watches started at the current revision (no start
	// revision) are never late.
	lateWatches atomic.Int64
	// reads and watches count the reads among the requests (etcd Range;
	// ZooKeeper exists, getData, getChildren) and the watches created
	// (etcd watch create requests; ZooKeeper reads with the watch flag).
	reads, watches atomic.Int64
}

// countSnapshot is a reading of counters.
type countSnapshot struct{ requests, events, keepalives, lateWatches, reads, watches int64 }

func (c *counters) snapshot() countSnapshot {
	if c == nil {
		return countSnapshot{}
	}
	return countSnapshot{c.requests.Load(), c.events.Load(), c.keepalives.Load(), c.lateWatches.Load(), c.reads.Load(), c.watches.Load()}
}

func (s countSnapshot) sub(o countSnapshot) countSnapshot {
	return countSnapshot{s.requests - o.requests, s.events - o.events, s.keepalives - o.keepalives, s.lateWatches - o.lateWatches,
		s.reads - o.reads, s.watches - o.watches}
}

// etcdDialOptions returns gRPC options that count the traffic of one etcd
// client into c. They chain after the client's own interceptors, so a
// request retried by the client counts once per attempt.
func etcdDialOptions(c *counters) []grpc.DialOption {
	if c == nil {
		return nil
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.requests.Add(1)
			if method == "/etcdserverpb.KV/Range" {
				c.reads.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &countingStream{ClientStream: s, keepalive: strings.HasSuffix(method, "/LeaseKeepAlive"), c: c}, nil
		}),
	}
}

type countingStream struct {
	grpc.ClientStream
	keepalive bool
	c         *counters

	// The start revisions of the watch create requests sent on this
	// stream and not yet confirmed, in order: the server confirms a
	// stream's creates in the order it receives them.
	mu     sync.Mutex
	starts []int64
}

func (s *countingStream) SendMsg(m any) error {
	if s.keepalive {
		s.c.keepalives.Add(1)
	} else {
		s.c.requests.Add(1)
	}
	if wr, ok := m.(*etcdserverpb.WatchRequest); ok {
		if cr := wr.GetCreateRequest(); cr != nil {
			s.c.watches.Add(1)
			s.mu.Lock()
			s.starts = append(s.starts, cr.StartRevision)
			s.mu.Unlock()
		}
	}
	return s.ClientStream.SendMsg(m)
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		if wr, ok := m.(*etcdserverpb.WatchResponse); ok {
			s.c.events.Add(int64(len(wr.Events)))
			if wr.Created {
				s.mu.Lock()
				var start int64
				if len(s.starts) > 0 {
					start, s.starts = s.starts[0], s.starts[1:]
				}
				s.mu.Unlock()
				if start != 0 && wr.Header != nil && start <= wr.Header.Revision {
					s.c.lateWatches.Add(1)
				}
			}
		}
	}
	return err
}

// zkDialer returns a go-zookeeper dialer whose connections count their
// frames into c. ZooKeeper frames are a 4-byte big-endian length and a
// payload; after the handshake a request starts with its xid (-2 for a
// ping) and a reply with its xid (-1 for a watch event, -2 for a ping).
func zkDialer(c *counters) func(network, address string, timeout time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		conn, err := net.DialTimeout(network, address, timeout)
		if err != nil || c == nil {
			return conn, err
		}
		cc := &countingConn{Conn: conn}
		cc.out.frame = func(p []byte) {
			if len(p) >= 4 && int32(binary.BigEndian.Uint32(p)) == -2 {
				c.keepalives.Add(1)
				return
			}
			c.requests.Add(1)
			c.countRead(p)
		}
		cc.in.frame = func(p []byte) {
			if len(p) >= 4 && int32(binary.BigEndian.Uint32(p)) == -1 {
				c.events.Add(1)
			}
		}
		return cc, nil
	}
}

// countRead counts the ZooKeeper request p (xid, type, body) if it is a
// read: exists, getData, getChildren or getChildren2, whose body ends
// with the watch flag.
func (c *counters) countRead(p []byte) {
	if len(p) < 9 {
		return
	}
	switch binary.BigEndian.Uint32(p[4:8]) {
	case 3, 4, 8, 12:
		c.reads.Add(1)
		if p[len(p)-1] == 1 {
			c.watches.Add(1)
		}
	}
}

type countingConn struct {
	net.Conn
	in, out framer // in: only the reading goroutine; out: only the writing one
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.feed(p[:n])
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.feed(p[:n])
	return n, err
}

// framer splits a byte stream into length-prefixed frames and hands every
// frame after the first (the handshake) to frame.
type framer struct {
	buf       []byte
	handshake bool
	frame     func(payload []byte)
}

func (f *framer) feed(p []byte) {
	f.buf = append(f.buf, p...)
	used := 0
	for len(f.buf)-used >= 4 {
		n := int(binary.BigEndian.Uint32(f.buf[used:]))
		if len(f.buf)-used-4 < n {
			break
		}
		payload := f.buf[used+4 : used+4+n]
		if f.handshake {
			f.frame(payload)
		}
		f.handshake = true
		used += 4 + n
	}
	if used > 0 {
		f.buf = append(f.buf[:0], f.buf[used:]...)
	}
}
