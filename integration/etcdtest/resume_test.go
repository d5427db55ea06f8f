package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// The environment of TestResumeProcess.
const (
	resumeEnvMode      = "FENCELOCK_RESUME_MODE" // "hold" or "resume"
	resumeEnvEndpoints = "FENCELOCK_RESUME_ENDPOINTS"
	resumeEnvPrefix    = "FENCELOCK_RESUME_PREFIX"
	resumeEnvName      = "FENCELOCK_RESUME_NAME"
	resumeEnvTTL       = "FENCELOCK_RESUME_TTL"
	resumeEnvTicket    = "FENCELOCK_RESUME_TICKET"
)

// fencedKey is the resource the processes of a resume test write to with
// PutFenced: its name's, under the test's prefix.
func fencedKey(prefix, name string) string { return prefix + "-resource/" + name }

// TestResumeProcess is the body of the helper processes of TestResume.
// Mode "hold" acquires the name, writes the resource with its token,
// prints "ticket <ticket>" and blocks until it is killed. Mode "resume"
// resumes the ticket and prints "failed <wraps ErrLost> <error>", or
// writes the resource with PutFenced and GuardedTxn and prints "resumed
// <token>"; then, when its stdin closes, it releases the lease and prints
// "released <error>". Run on its own it does nothing.
func TestResumeProcess(t *testing.T) {
	mode := os.Getenv(resumeEnvMode)
	if mode == "" {
		return
	}
	ttl, err := time.ParseDuration(os.Getenv(resumeEnvTTL))
	if err != nil {
		t.Fatalf("%s: %v", resumeEnvTTL, err)
	}
	client := newClient(t, strings.Split(os.Getenv(resumeEnvEndpoints), ","))
	prefix, name := os.Getenv(resumeEnvPrefix), os.Getenv(resumeEnvName)
	l := newLocker(t, client, etcdlock.WithPrefix(prefix), etcdlock.WithTTL(ttl))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if mode == "hold" {
		le, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		if _, err := etcdlock.PutFenced(ctx, client, fencedKey(prefix, name), "hold", le.Token()); err != nil {
			t.Fatalf("PutFenced(holder's token) = %v", err)
		}
		tk, err := le.(lock.Resumable).Ticket()
		if err != nil {
			t.Fatalf("Ticket() = %v", err)
		}
		fmt.Printf("ticket %s\n", tk)
		select {} // until SIGKILL
	}
	le, err := lock.Resume(ctx, l, name, lock.Ticket(os.Getenv(resumeEnvTicket)))
	if err != nil {
		fmt.Printf("failed %v %v\n", errors.Is(err, lock.ErrLost), err)
		return
	}
	if _, err := etcdlock.PutFenced(ctx, client, fencedKey(prefix, name), "resume", le.Token()); err != nil {
		t.Fatalf("PutFenced(resumed token) = %v", err)
	}
	if _, err := etcdlock.GuardedTxn(ctx, client, le, clientv3.OpPut(fencedKey(prefix, name)+"-guarded", "resume")); err != nil {
		t.Fatalf("GuardedTxn(resumed lease) = %v", err)
	}
	fmt.Printf("resumed %d\n", le.Token())
	_, _ = io.Copy(io.Discard, os.Stdin)
	fmt.Printf("released %v\n", le.Release(ctx))
}

// resumeEnv starts the processes of one TestResume case.
type resumeEnv struct {
	endpoints    []string
	prefix, name string
}

func (e *resumeEnv) start(t *testing.T, mode string, ttl time.Duration, tk lock.Ticket) *testutil.Proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestResumeProcess$", "-test.v")
	cmd.Env = append(os.Environ(), resumeEnvMode+"="+mode, resumeEnvEndpoints+"="+strings.Join(e.endpoints, ","),
		resumeEnvPrefix+"="+e.prefix, resumeEnvName+"="+e.name, resumeEnvTTL+"="+ttl.String(), resumeEnvTicket+"="+string(tk))
	return testutil.StartProc(t, cmd, testutil.ProcConfig{DropLines: true})
}

// line returns the rest of p's first line that starts with one of tags,
// and the tag.
func line(t *testing.T, p *testutil.Proc, tags ...string) (tag, rest string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-p.Lines:
			if !ok {
				t.Fatalf("process ended before a line starting with %q", tags)
			}
			for _, tag := range tags {
				if rest, ok := strings.CutPrefix(l, tag+" "); ok {
					return tag, rest
				}
			}
		case <-timeout:
			t.Fatalf("no line starting with %q within a minute", tags)
		}
	}
}

// hold starts a holder process with ttl and returns it and its ticket's
// fields: token and session lease.
func (e *resumeEnv) hold(t *testing.T, ttl time.Duration) (*testutil.Proc, lock.Ticket, fencing.Token, clientv3.LeaseID) {
	t.Helper()
	p := e.start(t, "hold", ttl, "")
	_, tk := line(t, p, "ticket")
	f := strings.Fields(tk)
	if len(f) != 4 || f[0] != "etcd/1" {
		t.Fatalf("ticket %q: want \"etcd/1 <token> <lease> <key>\"", tk)
	}
	tok, err1 := strconv.ParseUint(f[1], 10, 64)
	id, err2 := strconv.ParseInt(f[2], 16, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("ticket %q: %v %v", tk, err1, err2)
	}
	return p, lock.Ticket(tk), fencing.Token(tok), clientv3.LeaseID(id)
}

func kill(t *testing.T, p *testutil.Proc) {
	t.Helper()
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if code := p.Code(); code != 137 {
		t.Fatalf("the holder process exited with status %d; want 137 (SIGKILL)", code)
	}
}

// queue acquires e.name through l in the background, once the holder's
// record is in place, and returns when its record is queued behind it.
func (e *resumeEnv) queue(t *testing.T, l *etcdlock.Locker) <-chan lock.Lease {
	t.Helper()
	granted := make(chan lock.Lease, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		le, err := l.Acquire(ctx, e.name)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("waiter's Acquire() = %v", err)
			}
			return
		}
		granted <- le
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if q, err := l.Queue(ctx, e.name); err == nil && len(q) == 2 {
			return granted
		} else if time.Now().After(deadline) {
			t.Fatalf("Queue() = %v, %v; want the holder and the waiter", q, err)
		}
	}
}

// TestResume: a process holds a lock and writes its ticket, and is
// killed with SIGKILL, while a waiter is queued in this one.
//   - WithinTTL: a new process resumes the ticket before the old session
//     lease expires; its fenced writes with the same token are accepted,
//     and the waiter is granted only after it released, though the old
//     lease expired in between.
//   - AfterTTL: once the old lease expired and the waiter holds, a
//     resume fails with ErrLost and the waiter still holds.
//   - Race: two processes resume one ticket: exactly one succeeds, the
//     other fails with ErrLost.
//   - OldHolderRuns: a resume from a holder still running ends its lease
//     with ErrLost, its Release deletes nothing, a second resume of the
//     ticket fails, and no lock-delay applies to the resume or after its
//     clean release.
func TestResume(t *testing.T) {
	c := startCluster(t)
	client := newClient(t, c.Endpoints())
	newEnv := func(t *testing.T) *resumeEnv {
		return &resumeEnv{endpoints: c.Endpoints(), prefix: "resume-" + testutil.UniqueName(t), name: "job"}
	}
	t.Run("WithinTTL", func(t *testing.T) { testResumeWithinTTL(t, newEnv(t), client) })
	t.Run("AfterTTL", func(t *testing.T) { testResumeAfterTTL(t, newEnv(t), client) })
	t.Run("Race", func(t *testing.T) { testResumeRace(t, newEnv(t)) })
	t.Run("OldHolderRuns", func(t *testing.T) { testResumeOldHolderRuns(t, newEnv(t), client) })
}

func testResumeWithinTTL(t *testing.T, e *resumeEnv, client *clientv3.Client) {
	const ttl = 5 * time.Second
	holder, tk, tok, old := e.hold(t, ttl)
	waiter := e.queue(t, newLocker(t, client, etcdlock.WithPrefix(e.prefix)))
	kill(t, holder)
	resumer := e.start(t, "resume", ttl, tk)
	if tag, rest := line(t, resumer, "resumed", "failed"); tag != "resumed" || rest != tok.String() {
		t.Fatalf("resume: %s %s; want resumed %d", tag, rest, tok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		resp, err := client.TimeToLive(ctx, old)
		if err != nil {
			t.Fatalf("TimeToLive(old lease) = %v", err)
		}
		if resp.TTL == -1 {
			break // expired: only the resumer keeps the record now
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(ttl / 2)
	select {
	case le := <-waiter:
		t.Fatalf("the waiter was granted (token %d) while the resumed lease was held", le.Token())
	default:
	}
	if h, err := newLocker(t, client, etcdlock.WithPrefix(e.prefix)).Holder(ctx, e.name); err != nil || h.Token != tok {
		t.Fatalf("Holder() = %+v, %v; want token %d", h, err, tok)
	}
	_ = resumer.Stdin.Close()
	if _, rest := line(t, resumer, "released"); rest != "<nil>" {
		t.Fatalf("resumer's Release() = %s", rest)
	}
	select {
	case le := <-waiter:
		if le.Token() <= tok {
			t.Fatalf("waiter's token %d; want above %d", le.Token(), tok)
		}
		if _, err := etcdlock.PutFenced(ctx, client, fencedKey(e.prefix, e.name), "waiter", le.Token()); err != nil {
			t.Fatalf("PutFenced(waiter's token) = %v", err)
		}
		if _, err := etcdlock.PutFenced(ctx, client, fencedKey(e.prefix, e.name), "stale", tok); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("PutFenced(resumed token after the waiter's) = %v; want %v", err, fencing.ErrStaleToken)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the waiter was not granted after the resumed lease's release")
	}
}

func testResumeAfterTTL(t *testing.T, e *resumeEnv, client *clientv3.Client) {
	const ttl = 2 * time.Second
	holder, tk, _, _ := e.hold(t, ttl)
	waiter := e.queue(t, newLocker(t, client, etcdlock.WithPrefix(e.prefix)))
	kill(t, holder)
	var le lock.Lease
	select {
	case le = <-waiter:
	case <-time.After(30 * time.Second):
		t.Fatalf("the waiter was not granted after the holder's lease expired")
	}
	resumer := e.start(t, "resume", ttl, tk)
	if tag, rest := line(t, resumer, "resumed", "failed"); tag != "failed" || !strings.HasPrefix(rest, "true ") {
		t.Fatalf("resume after the TTL: %s %s; want failed with ErrLost", tag, rest)
	}
	if code := resumer.Code(); code != 0 {
		t.Fatalf("resumer exited with status %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := etcdlock.GuardedTxn(ctx, client, le); err != nil || le.Err() != nil {
		t.Fatalf("waiter after the failed resume: GuardedTxn() = %v, Err() = %v; want held", err, le.Err())
	}
}

func testResumeRace(t *testing.T, e *resumeEnv) {
	const ttl = 10 * time.Second
	holder, tk, tok, _ := e.hold(t, ttl)
	kill(t, holder)
	procs := []*testutil.Proc{e.start(t, "resume", ttl, tk), e.start(t, "resume", ttl, tk)}
	won := 0
	for i, p := range procs {
		switch tag, rest := line(t, p, "resumed", "failed"); {
		case tag == "resumed" && rest == tok.String():
			won++
			_ = p.Stdin.Close()
		case tag == "failed" && strings.HasPrefix(rest, "true "):
		default:
			t.Errorf("resumer %d: %s %s; want resumed %d, or failed with ErrLost", i, tag, rest, tok)
		}
	}
	if won != 1 {
		t.Fatalf("%d of 2 processes resumed one ticket; want 1", won)
	}
}

func testResumeOldHolderRuns(t *testing.T, e *resumeEnv, client *clientv3.Client) {
	const delay = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newL := func() *etcdlock.Locker {
		return newLocker(t, client, etcdlock.WithPrefix(e.prefix), etcdlock.WithLockDelay(delay))
	}
	old, err := newL().Acquire(ctx, e.name)
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	tk, err := old.(lock.Resumable).Ticket()
	if err != nil {
		t.Fatalf("Ticket() = %v", err)
	}
	start := time.Now()
	le, err := lock.Resume(ctx, newL(), e.name, tk)
	if err != nil || le.Token() != old.Token() {
		t.Fatalf("Resume() = %v, %v; want token %d", le, err, old.Token())
	}
	if d := time.Since(start); d >= delay {
		t.Errorf("Resume() took %v; want no lock-delay (%v)", d, delay)
	}
	select {
	case <-old.Done():
		if err := old.Err(); !errors.Is(err, lock.ErrLost) {
			t.Errorf("old lease's Err() = %v; want %v", err, lock.ErrLost)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the old lease did not end after its record was resumed")
	}
	if err := old.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("old lease's Release() = %v; want %v", err, lock.ErrLost)
	}
	if _, err := lock.Resume(ctx, newL(), e.name, tk); !errors.Is(err, lock.ErrLost) {
		t.Errorf("second Resume() of the ticket = %v; want %v", err, lock.ErrLost)
	}
	if _, err := etcdlock.GuardedTxn(ctx, client, le); err != nil || le.Err() != nil {
		t.Fatalf("resumed lease: GuardedTxn() = %v, Err() = %v; want held", err, le.Err())
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release(resumed lease) = %v", err)
	}
	start = time.Now()
	next, err := newL().Acquire(ctx, e.name)
	if err != nil {
		t.Fatalf("Acquire() after the resumed lease's release = %v", err)
	}
	if d := time.Since(start); d >= delay || next.Token() <= le.Token() {
		t.Errorf("Acquire() after a clean release: token %d in %v; want above %d, no lock-delay", next.Token(), d, le.Token())
	}
}
