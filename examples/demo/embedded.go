package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// embeddedEtcd is a real, single-member etcd server running inside this
// process, with its data in a temporary directory.
type embeddedEtcd struct {
	etcd *embed.Etcd
	dir  string
	addr string
}

// startEmbeddedEtcd starts an etcd server on free 127.0.0.1 ports. Its short
// heartbeat (50ms) lets the server accept 1s lease TTLs, so the demo does not
// wait long for an expiry.
func startEmbeddedEtcd(ctx context.Context) (*embeddedEtcd, error) {
	var lastErr error
	// A port picked free can be taken before etcd binds it; try again then.
	for attempt := 0; attempt < 3; attempt++ {
		e, err := tryStartEmbeddedEtcd(ctx)
		if err == nil {
			return e, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func tryStartEmbeddedEtcd(ctx context.Context) (*embeddedEtcd, error) {
	dir, err := os.MkdirTemp("", "fencelock-demo-etcd-")
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	clientURL := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(ports[0])}
	peerURL := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(ports[1])}

	cfg := embed.NewConfig()
	cfg.Name = "demo"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs = 50
	cfg.ElectionMs = 500
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded etcd: start: %w", err)
	}
	stop := func() {
		e.Close()
		os.RemoveAll(dir)
	}
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		stop()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-timer.C:
		stop()
		return nil, errors.New("embedded etcd: not ready after 30s")
	case <-ctx.Done():
		stop()
		return nil, fmt.Errorf("embedded etcd: %w", ctx.Err())
	}
	return &embeddedEtcd{etcd: e, dir: dir, addr: clientURL.Host}, nil
}

// Addr returns the client address, host:port.
func (e *embeddedEtcd) Addr() string { return e.addr }

// Close stops the server and removes its data directory.
func (e *embeddedEtcd) Close() {
	e.etcd.Close()
	os.RemoveAll(e.dir)
}

// freePorts returns n TCP ports on 127.0.0.1 that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
