package etcdlock

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/lock"
)

// The keepalive loop on a fake clock and a fake KeepAliveOnce. With a TTL
// of 3s and a loss margin of 600ms, a session granted at t0 must be
// renewed by t0+2.4s, keepalives go every second, and each acknowledged
// keepalive moves the deadline to its send time plus 2.4s.
const (
	kaTTL    = 3 * time.Second
	kaMargin = 600 * time.Millisecond
	kaSlack  = kaTTL - kaMargin
)

var kaT0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

type kaCall struct {
	ctx   context.Context
	reply chan kaReply
}

type kaReply struct {
	ttl int64
	err error
}

// kaRig is one session whose keepalive loop runs on a fake clock, with
// every KeepAliveOnce handed to the test.
type kaRig struct {
	t       *testing.T
	clk     *clock.Fake
	s       *session
	calls   chan kaCall
	revoked atomic.Int32
	stopped chan struct{}
}

func newKARig(t *testing.T) *kaRig {
	t.Helper()
	o, err := buildOptions([]Option{WithTTL(kaTTL), WithLossMargin(kaMargin), WithLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	r := &kaRig{t: t, clk: clock.NewFake(kaT0), calls: make(chan kaCall), stopped: make(chan struct{})}
	l := newLocker(nil, o)
	l.clk = r.clk
	r.s = newSession(l, 7, kaT0)
	send := func(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
		c := kaCall{ctx: ctx, reply: make(chan kaReply, 1)}
		select {
		case r.calls <- c:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case rep := <-c.reply:
			if rep.err != nil {
				return nil, rep.err
			}
			return &clientv3.LeaseKeepAliveResponse{ID: id, TTL: rep.ttl}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	k := newKeepalive(r.s, r.clk, send, func() { r.revoked.Add(1) })
	go func() {
		defer close(r.stopped)
		k.run()
	}()
	t.Cleanup(func() {
		r.s.end(errors.New("test over"), false)
		l.g.endLife()
		<-r.stopped
	})
	r.clk.WaitTimers(2) // the loss and send timers are armed
	return r
}

// call advances the clock by d and returns the keepalive that sends.
func (r *kaRig) call(d time.Duration) kaCall {
	r.t.Helper()
	r.clk.Advance(d)
	select {
	case c := <-r.calls:
		return c
	case <-time.After(5 * time.Second):
		r.t.Fatalf("no keepalive sent at %v", r.clk.Now().Sub(kaT0))
		return kaCall{}
	}
}

// answer answers c and waits until the loop has re-armed its send timer.
func (r *kaRig) answer(c kaCall, rep kaReply) {
	r.t.Helper()
	c.reply <- rep
	r.clk.WaitTimers(2)
}

func (r *kaRig) deadline() time.Time {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.s.deadline
}

func (r *kaRig) ended() bool {
	select {
	case <-r.s.done:
		return true
	default:
		return false
	}
}

// waitEnded waits for the loop to end the session.
func (r *kaRig) waitEnded() {
	r.t.Helper()
	select {
	case <-r.s.done:
	case <-time.After(5 * time.Second):
		r.t.Fatalf("session not ended at %v (deadline %v)", r.clk.Now().Sub(kaT0), r.deadline().Sub(kaT0))
	}
}

func TestKeepaliveAckExtendsDeadline(t *testing.T) {
	r := newKARig(t)
	if got, want := r.deadline(), kaT0.Add(kaSlack); !got.Equal(want) {
		t.Fatalf("deadline of a new session = t0+%v; want t0+%v", got.Sub(kaT0), want.Sub(kaT0))
	}
	c := r.call(time.Second) // first keepalive a third of the TTL in
	r.answer(c, kaReply{ttl: 3})
	if got, want := r.deadline(), kaT0.Add(time.Second+kaSlack); !got.Equal(want) {
		t.Errorf("deadline after an ack of a keepalive sent at t0+1s = t0+%v; want t0+%v", got.Sub(kaT0), want.Sub(kaT0))
	}
	c = r.call(time.Second) // the next one an interval after the last send
	r.answer(c, kaReply{ttl: 3})
	if got, want := r.deadline(), kaT0.Add(2*time.Second+kaSlack); !got.Equal(want) {
		t.Errorf("deadline after the second ack = t0+%v; want t0+%v", got.Sub(kaT0), want.Sub(kaT0))
	}
	if r.ended() {
		t.Error("session ended while every keepalive was acknowledged")
	}
}

func TestKeepaliveLateAckCountsFromSend(t *testing.T) {
	r := newKARig(t)
	c := r.call(time.Second)
	r.clk.Advance(time.Second) // the answer takes a second
	// The next keepalive is due an interval after the send, so at once.
	c.reply <- kaReply{ttl: 3}
	r.call(0)
	if got, want := r.deadline(), kaT0.Add(time.Second+kaSlack); !got.Equal(want) {
		t.Errorf("deadline after a late ack = t0+%v; want t0+%v (send time plus TTL minus margin, not receive time)", got.Sub(kaT0), want.Sub(kaT0))
	}
}

func TestKeepaliveLossAtDeadline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra time.Duration // past the deadline
		lost  bool
	}{
		{"one ns before", -1, false},
		{"at", 0, true},
		{"one ns after", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newKARig(t)
			c := r.call(time.Second)
			r.answer(c, kaReply{ttl: 3})
			deadline := kaT0.Add(time.Second + kaSlack)
			// Keepalives from now on go unanswered: the member stopped
			// answering. Each attempt is left hanging.
			r.clk.Advance(deadline.Sub(r.clk.Now()) + tc.extra)
			if !tc.lost {
				// The send timer fired (and is not re-armed while its
				// keepalive hangs); the loss timer must still be armed.
				if n := r.clk.Timers(); n != 1 || r.ended() {
					t.Fatalf("1ns before the deadline: %d timers armed, session ended %v; want the loss timer armed and the session alive", n, r.ended())
				}
				r.clk.Advance(1)
			}
			r.waitEnded()
			<-r.stopped // the loop revokes the lease after ending the session
			if err := r.s.lostErr(); !errors.Is(err, lock.ErrLost) {
				t.Errorf("session end = %v; want an error wrapping lock.ErrLost", err)
			}
			if got := r.revoked.Load(); got != 1 {
				t.Errorf("revoke called %d times after a local loss; want 1", got)
			}
		})
	}
}

func TestKeepaliveLeaseNotFound(t *testing.T) {
	for _, tc := range []struct {
		name string
		rep  kaReply
	}{
		{"error", kaReply{err: rpctypes.ErrLeaseNotFound}},
		{"ttl 0", kaReply{ttl: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newKARig(t)
			c := r.call(time.Second)
			c.reply <- tc.rep
			r.waitEnded()
			if err := r.s.lostErr(); !errors.Is(err, lock.ErrLost) {
				t.Errorf("session end = %v; want an error wrapping lock.ErrLost", err)
			}
			if now := r.clk.Now(); !now.Equal(kaT0.Add(time.Second)) {
				t.Errorf("ended at t0+%v; want at once, t0+1s", now.Sub(kaT0))
			}
			if got := r.revoked.Load(); got != 0 {
				t.Errorf("revoke called %d times for a lease the server no longer has; want 0", got)
			}
		})
	}
}

func TestKeepaliveErrorRetried(t *testing.T) {
	r := newKARig(t)
	c := r.call(time.Second)
	r.answer(c, kaReply{err: errors.New("connection reset")})
	// A failed keepalive is sent again after the retry delay, 250ms here.
	c = r.call(250 * time.Millisecond)
	r.answer(c, kaReply{ttl: 3})
	if got, want := r.deadline(), kaT0.Add(1250*time.Millisecond+kaSlack); !got.Equal(want) {
		t.Errorf("deadline after a retried keepalive = t0+%v; want t0+%v", got.Sub(kaT0), want.Sub(kaT0))
	}
	if r.ended() {
		t.Error("session ended after a failed keepalive within the deadline")
	}
	// A timed-out attempt is sent again at once, to the next member.
	c = r.call(time.Second)
	c.reply <- kaReply{err: context.DeadlineExceeded}
	c = r.call(0)
	r.answer(c, kaReply{ttl: 3})
	if got, want := r.deadline(), kaT0.Add(2250*time.Millisecond+kaSlack); !got.Equal(want) {
		t.Errorf("deadline after a timed-out keepalive and its retry = t0+%v; want t0+%v", got.Sub(kaT0), want.Sub(kaT0))
	}
}

func TestKeepaliveStopsWithSession(t *testing.T) {
	r := newKARig(t)
	c := r.call(time.Second) // left in flight
	r.s.end(errors.New("closed"), false)
	select {
	case <-r.stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("keepalive loop still running after its session ended")
	}
	if err := c.ctx.Err(); err == nil {
		t.Error("the keepalive in flight was not cancelled when the loop stopped")
	}
	if got := r.revoked.Load(); got != 0 {
		t.Errorf("revoke called %d times after a clean end; want 0", got)
	}
}
