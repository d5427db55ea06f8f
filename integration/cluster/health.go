package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// memberHealth implements clusterImpl for either provider by asking each
// running member over its client address. Providers build it with
// newMemberHealth.
type memberHealth struct {
	kind    Kind
	members []Member
}

// newMemberHealth returns the leader lookup and health check of a cluster of
// kind made of members.
func newMemberHealth(kind Kind, members []Member) clusterImpl {
	return &memberHealth{kind: kind, members: members}
}

// pollInterval is how often leader and waitHealthy ask again.
const pollInterval = 100 * time.Millisecond

// probeTimeout bounds one question to one member.
const probeTimeout = 2 * time.Second

// memberState is what one member says about itself.
type memberState struct {
	// etcd: the member's ID and the leader's ID (0 if none).
	id, leaderID uint64
	// ZooKeeper: "leader", "follower", "observer" or "standalone".
	mode string
}

func (s memberState) isLeader(kind Kind) bool {
	if kind == Etcd {
		return s.leaderID != 0 && s.id == s.leaderID
	}
	return s.mode == "leader" || s.mode == "standalone"
}

// probeMember asks the server at addr for its state. An error means it does
// not answer, or answers that it is not serving.
func probeMember(ctx context.Context, kind Kind, addr string) (memberState, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	switch kind {
	case Etcd:
		return probeEtcd(ctx, addr)
	case ZooKeeper:
		return probeZooKeeper(ctx, addr)
	}
	return memberState{}, fmt.Errorf("cluster: unknown kind %q", kind)
}

func probeEtcd(ctx context.Context, addr string) (memberState, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{addr},
		Logger:    zap.NewNop(),
		Context:   ctx,
		TLS:       probeTLS(addr), // nil but for a secured member (secure_etcd.go)
	})
	if err != nil {
		return memberState{}, err
	}
	defer cli.Close()
	resp, err := cli.Status(ctx, addr)
	if err != nil {
		return memberState{}, err
	}
	if len(resp.Errors) > 0 {
		return memberState{}, fmt.Errorf("etcd %s reports errors: %s", addr, strings.Join(resp.Errors, "; "))
	}
	return memberState{id: resp.Header.MemberId, leaderID: resp.Leader}, nil
}

func probeZooKeeper(ctx context.Context, addr string) (memberState, error) {
	out, err := FourLetterWord(ctx, addr, "srvr")
	if err != nil {
		return memberState{}, err
	}
	for _, line := range strings.Split(out, "\n") {
		if mode, ok := strings.CutPrefix(line, "Mode: "); ok {
			return memberState{mode: strings.TrimSpace(mode)}, nil
		}
	}
	return memberState{}, fmt.Errorf("zookeeper %s is not serving: %q", addr, strings.TrimSpace(out))
}

// FourLetterWord sends a ZooKeeper four-letter command ("srvr", "mntr",
// "ruok", ...) to addr and returns the whole answer. ctx bounds the dial,
// the write and the read.
func FourLetterWord(ctx context.Context, addr, cmd string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	// A frozen server accepts the connection in the kernel but never
	// answers, so the end of ctx is what ends the read. (Not a deadline
	// of the ctx's own: it could fire before ctx reports its error.)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(bufio.NewReader(conn))
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("%s %s: %w: %w", cmd, addr, ctx.Err(), err)
		}
		return "", err
	}
	return string(b), nil
}

// snapshot asks every running member for its state. states[i] is valid
// when errs[i] is nil and running[i] is true.
func (h *memberHealth) snapshot(ctx context.Context) (states []memberState, errs []error, running []bool) {
	n := len(h.members)
	states, errs, running = make([]memberState, n), make([]error, n), make([]bool, n)
	done := make(chan struct{}, n)
	for i, m := range h.members {
		running[i] = m.Running()
		if !running[i] {
			done <- struct{}{}
			continue
		}
		go func() {
			states[i], errs[i] = probeMember(ctx, h.kind, m.ClientAddr())
			done <- struct{}{}
		}()
	}
	for range n {
		<-done
	}
	return states, errs, running
}

// check returns the leader's index when every running member answers and
// agrees on a leader that is running.
func (h *memberHealth) check(ctx context.Context, all bool) (int, error) {
	states, errs, running := h.snapshot(ctx)
	leader, nrun := -1, 0
	var problems []error
	for i, m := range h.members {
		if !running[i] {
			continue
		}
		nrun++
		if errs[i] != nil {
			problems = append(problems, fmt.Errorf("%s: %w", m.Name(), errs[i]))
			continue
		}
		if states[i].isLeader(h.kind) {
			if leader >= 0 {
				problems = append(problems, fmt.Errorf("%s and %s both lead", h.members[leader].Name(), m.Name()))
			}
			leader = i
		}
	}
	if nrun == 0 {
		return -1, errors.New("no member is running")
	}
	if leader < 0 {
		problems = append(problems, errors.New("no running member is the leader"))
	} else if h.kind == Etcd {
		want := states[leader].id
		for i, m := range h.members {
			if running[i] && errs[i] == nil && states[i].leaderID != want {
				problems = append(problems, fmt.Errorf("%s follows leader %x, not %s (%x)", m.Name(), states[i].leaderID, h.members[leader].Name(), want))
			}
		}
	}
	if len(problems) > 0 && (all || leader < 0) {
		return -1, errors.Join(problems...)
	}
	return leader, nil
}

// poll calls check until it succeeds or ctx ends.
func (h *memberHealth) poll(ctx context.Context, all bool) (int, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		i, err := h.check(ctx, all)
		if err == nil {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("cluster: %s: %w: %w", h.kind, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func (h *memberHealth) leader(ctx context.Context) (int, error) { return h.poll(ctx, false) }

func (h *memberHealth) waitHealthy(ctx context.Context) error {
	_, err := h.poll(ctx, true)
	return err
}

// memberAnswers polls until the member at addr answers as a member of a
// working cluster (etcd: it knows a leader; ZooKeeper: it serves
// requests), or ctx ends.
func memberAnswers(ctx context.Context, kind Kind, addr string) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		s, err := probeMember(ctx, kind, addr)
		if err == nil && kind == Etcd && s.leaderID == 0 {
			err = errors.New("no leader known")
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: %s %s does not answer: %w: %w", kind, addr, ctx.Err(), err)
		case <-t.C:
		}
	}
}
