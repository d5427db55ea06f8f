package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// keepaliveSender is the client's KeepAliveOnce, or a fake in unit tests.
type keepaliveSender func(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)

// keepalive keeps one session's lease alive and owns its loss deadline:
// the send time of the last acknowledged keepalive plus life, the TTL
// minus the loss margin (docs/design/etcd.md, "The loss deadline").
type keepalive struct {
	s        *session
	clk      clock.Clock
	send     keepaliveSender
	revoke   func() // after a local loss: revoke the lease as soon as possible
	life     time.Duration
	interval time.Duration // between keepalives: a third of the TTL

	deadline  time.Time
	lossTimer clock.Timer
	sendTimer clock.Timer
	results   chan keepaliveResult
}

type keepaliveResult struct {
	sent time.Time
	err  error
}

func newKeepalive(s *session, clk clock.Clock, send keepaliveSender, revoke func()) *keepalive {
	return &keepalive{
		s: s, clk: clk, send: send, revoke: revoke,
		life:     s.l.opts.ttl - s.l.opts.LossMargin,
		interval: s.l.opts.ttl / 3,
		deadline: s.deadline, // only the keepalive writes it
		results:  make(chan keepaliveResult, 1),
	}
}

// run sends keepalives until the session ends, and ends it, lost, when
// the deadline passes or the server says the lease is gone.
func (k *keepalive) run() {
	// Not WithRequireLeader: KeepAliveOnce retries "unavailable" answers
	// at once, and a member without a leader would make that a busy loop.
	rpcCtx, cancelRPC := context.WithCancel(k.s.l.g.life)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	defer cancelRPC()

	now := k.clk.Now()
	k.lossTimer = k.clk.NewTimer(k.deadline.Sub(now))
	defer k.lossTimer.Stop()
	k.sendTimer = k.clk.NewTimer(k.deadline.Add(k.interval - k.life).Sub(now))
	defer k.sendTimer.Stop()
	for {
		select {
		case <-k.s.done:
			return
		case <-k.lossTimer.C():
			k.s.end(telemetry.WithReason(telemetry.Disconnected, fmt.Errorf("%w: no keepalive acknowledged within %v of the ttl %v (last acknowledged keepalive sent at %s)",
				lock.ErrLost, k.life, k.s.l.opts.ttl, k.deadline.Add(-k.life).Format(time.RFC3339Nano))), true)
			k.revoke()
			return
		case <-k.sendTimer.C():
			k.start(rpcCtx, &inflight)
		case r := <-k.results:
			if k.handle(rpcCtx, r) {
				return
			}
		}
	}
}

// start sends one keepalive in the background, given half an interval
// (never beyond the deadline) before the next one is tried.
func (k *keepalive) start(rpcCtx context.Context, inflight *sync.WaitGroup) {
	sent := k.clk.Now()
	// A bound on the keepalive's clock, turned into a real timeout.
	ctx, cancel := context.WithTimeout(rpcCtx, min(k.interval/2, k.deadline.Sub(sent)))
	inflight.Go(func() {
		defer cancel()
		resp, err := k.send(ctx, k.s.id)
		if err == nil && resp.TTL <= 0 {
			err = rpctypes.ErrLeaseNotFound
		}
		k.results <- keepaliveResult{sent: sent, err: err}
	})
}

// handle takes the answer to a keepalive sent at r.sent, and reports
// whether the session has ended.
func (k *keepalive) handle(rpcCtx context.Context, r keepaliveResult) bool {
	switch {
	case r.err == nil:
		// A late answer counts from its send time: the server renewed the
		// lease no earlier than that.
		if d := r.sent.Add(k.life); d.After(k.deadline) {
			k.deadline = d
			k.s.mu.Lock()
			k.s.deadline = d
			k.s.mu.Unlock()
			k.lossTimer.Reset(d.Sub(k.clk.Now()))
		}
		k.sendTimer.Reset(r.sent.Add(k.interval).Sub(k.clk.Now()))
	case errors.Is(r.err, rpctypes.ErrLeaseNotFound):
		k.s.end(telemetry.WithReason(telemetry.Expired, fmt.Errorf("%w: lease %x expired or was revoked", lock.ErrLost, int64(k.s.id))), true)
		return true
	default:
		now := k.clk.Now()
		if !now.Before(k.deadline) {
			return false // the loss timer fires now
		}
		if rpcCtx.Err() == nil {
			k.s.l.opts.Logger.Debug("etcdlock: keepalive failed", "session", fmt.Sprintf("%x", int64(k.s.id)), "err", r.err)
		}
		if errors.Is(r.err, context.DeadlineExceeded) {
			k.sendTimer.Reset(0) // the attempt timed out: try the next member now
		} else {
			k.sendTimer.Reset(min(k.interval/4, 250*time.Millisecond))
		}
	}
	return false
}
