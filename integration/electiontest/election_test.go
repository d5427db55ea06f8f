package electiontest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
)

// waitTimeout bounds every wait for an event that must happen.
const waitTimeout = 30 * time.Second

// failoverSlack is how much longer than sessionTTL a failover after a kill
// may take: the server's expiry check, the watch notification to the next
// candidate and its grant, on a machine shared with other tests. Measured
// failovers are logged.
const failoverSlack = 3 * time.Second

// handoverBound is the longest a handover after Resign may take: a release
// and a watch notification, that is about one round trip, plus scheduling
// on a loaded machine.
const handoverBound = time.Second

var nameSeq atomic.Int64

// uniqueName returns a lock name no other test or run uses.
func uniqueName(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("e%d-%d/%d", os.Getpid(), time.Now().UnixNano(), nameSeq.Add(1))
}

// event is a callback of an in-process candidate, with the time it ran.
type event struct {
	at   time.Time
	term fencing.Token
	err  error // OnStopped's error, or the cause of the leadership ctx
}

// cand is an in-process candidate running Election.Run.
type cand struct {
	id      string
	l       lock.Locker
	e       *lock.Election
	started chan event // OnStarted was called
	ctxDone chan event // OnStarted saw its leadership context end
	stopped chan event // OnStopped was called

	cancel   context.CancelFunc
	finished chan struct{}
	runErr   error
}

// candidate starts an in-process candidate with identity id for the
// election name on a Locker of its own (through eps if given). mod, if not
// nil, adjusts the configuration.
func (e *env) candidate(t *testing.T, id, name string, mod func(*lock.ElectionConfig), eps ...string) *cand {
	t.Helper()
	c := &cand{
		id:       id,
		l:        e.open(t, id, eps...),
		started:  make(chan event, 100),
		ctxDone:  make(chan event, 100),
		stopped:  make(chan event, 100),
		finished: make(chan struct{}),
	}
	cfg := lock.ElectionConfig{
		OnStarted: func(ctx context.Context, term fencing.Token) {
			c.started <- event{at: time.Now(), term: term}
			<-ctx.Done()
			c.ctxDone <- event{at: time.Now(), term: term, err: context.Cause(ctx)}
		},
		OnStopped: func(term fencing.Token, err error) {
			c.stopped <- event{at: time.Now(), term: term, err: err}
		},
		OnError:        func(err error) { t.Logf("%s: %v", id, err) },
		MinBackoff:     10 * time.Millisecond,
		MaxBackoff:     500 * time.Millisecond,
		ReleaseTimeout: 2 * time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	el, err := lock.NewElection(c.l, name, cfg)
	if err != nil {
		t.Fatalf("NewElection(%q) = %v; want nil", name, err)
	}
	c.e = el
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.finished)
		c.runErr = el.Run(ctx)
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop cancels Run's context and waits for Run to return.
func (c *cand) stop(t *testing.T) error {
	t.Helper()
	c.cancel()
	select {
	case <-c.finished:
		return c.runErr
	case <-time.After(waitTimeout):
		t.Fatalf("%s: Run did not return within %v of its context's end", c.id, waitTimeout)
		return nil
	}
}

// proc is a candidate running in a child process (the test binary in
// candidate mode), so that it can be killed.
type proc struct {
	id     string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // its standard output, line by line
	stderr *testutil.SyncBuffer
	exited chan struct{} // closed once the process has been reaped
	state  *os.ProcessState
}

// spawn starts a candidate process with identity id for the election name.
func (e *env) spawn(t *testing.T, id, name string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), candidateEnvURL+"="+e.url(e.c.Endpoints(), id), candidateEnvName+"="+name)
	p := &proc{id: id, cmd: cmd, lines: make(chan string, 100), stderr: new(testutil.SyncBuffer), exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("StdoutPipe() = %v", err)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatalf("StdinPipe() = %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start candidate process: %v", err)
	}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		_ = cmd.Wait() // after the last read, as StdoutPipe requires
		p.state = cmd.ProcessState
	}()
	t.Cleanup(func() {
		_ = p.stdin.Close() // asks it to resign and exit
		select {
		case <-p.exited:
		case <-time.After(waitTimeout):
			_ = cmd.Process.Kill() // by its PID
			<-p.exited
		}
		if t.Failed() {
			t.Logf("candidate process %s (pid %d) stderr:\n%s", id, cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

// expectStarted waits for the process to report a term and returns it.
func (p *proc) expectStarted(t *testing.T) fencing.Token {
	t.Helper()
	for {
		line := testutil.Recv(t, p.lines, waitTimeout, fmt.Sprintf("output of candidate process %s", p.id))
		rest, ok := strings.CutPrefix(line, "started ")
		if !ok {
			t.Logf("candidate process %s: %s", p.id, line)
			continue
		}
		tok, err := fencing.ParseToken(rest)
		if err != nil {
			t.Fatalf("candidate process %s wrote %q: %v", p.id, line, err)
		}
		return tok
	}
}

// kill sends SIGKILL to the process and waits until it is reaped, checking
// that the signal killed it.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill candidate process %d: %v", p.cmd.Process.Pid, err)
	}
	testutil.Recv(t, p.exited, waitTimeout, "exit of the killed candidate process")
	ws, ok := p.state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("candidate process ended with %v; want killed by SIGKILL", p.state)
	}
}

// summary formats the median and maximum of ds.
func summary(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return "no runs"
	}
	return fmt.Sprintf("median %v, max %v over %d runs", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}

func TestElection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, env *env) {
		t.Run("OneLeaderAtATime", func(t *testing.T) { testOneLeaderAtATime(t, env) })
		t.Run("ResignHandover", func(t *testing.T) { testResignHandover(t, env) })
		t.Run("FailoverAfterKill", func(t *testing.T) { testFailoverAfterKill(t, env) })
		t.Run("ObserveInOrder", func(t *testing.T) { testObserveInOrder(t, env) })
		t.Run("PartitionedLeaderStopsFirst", func(t *testing.T) { testPartitionedLeader(t, env) })
	})
}

// testOneLeaderAtATime runs candidates that resign as soon as they are
// elected, and checks that no two OnStarted..OnStopped spans overlap and
// that terms rise.
func testOneLeaderAtATime(t *testing.T, env *env) {
	const (
		candidates = 4
		terms      = 40
	)
	name := uniqueName(t)
	var (
		mu       sync.Mutex
		active   string
		lastTerm fencing.Token
		leaders  = map[string]int{}
		started  = map[fencing.Token]string{}
		stopped  = map[fencing.Token]string{}
		failures []string
		total    int
	)
	enough := make(chan struct{})
	fail := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
	cands := make([]*cand, candidates)
	for i := range cands {
		id := fmt.Sprintf("one-%d", i)
		var self *cand
		ready := make(chan struct{}) // closed once self is set
		cands[i] = env.candidate(t, id, name, func(cfg *lock.ElectionConfig) {
			cfg.OnStarted = func(ctx context.Context, term fencing.Token) {
				<-ready
				mu.Lock()
				if active != "" {
					fail("%s started term %v while %s was leading", id, term, active)
				}
				if term <= lastTerm {
					fail("%s: term %v after term %v; want rising terms", id, term, lastTerm)
				}
				active, lastTerm = id, term
				started[term] = id
				leaders[id]++
				if total++; total == terms {
					close(enough)
				}
				mu.Unlock()
				if err := self.e.Resign(ctx); err != nil {
					mu.Lock()
					fail("%s: Resign(leadership ctx) = %v; want nil", id, err)
					mu.Unlock()
				}
				<-ctx.Done()
			}
			cfg.OnStopped = func(term fencing.Token, err error) {
				mu.Lock()
				defer mu.Unlock()
				if started[term] != id {
					fail("%s: OnStopped(%v) without its OnStarted", id, term)
				}
				if _, dup := stopped[term]; dup {
					fail("%s: OnStopped(%v) twice", id, term)
				}
				stopped[term] = id
				if err != nil {
					fail("%s: OnStopped(%v, %v); want nil after Resign", id, term, err)
				}
				if active != id {
					fail("%s: OnStopped(%v) while %q was leading", id, term, active)
				}
				active = ""
			}
		})
		self = cands[i]
		close(ready)
	}
	testutil.Recv(t, enough, waitTimeout, fmt.Sprintf("%d terms", terms))
	for _, c := range cands {
		if err := c.stop(t); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Run() = %v; want an error wrapping context.Canceled", c.id, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range failures {
		t.Error(f)
	}
	if len(stopped) != len(started) {
		t.Errorf("%d terms stopped, %d started; want equal once every Run returned", len(stopped), len(started))
	}
	if len(leaders) != candidates {
		t.Errorf("leaders = %v; want all %d candidates to lead in turn", leaders, candidates)
	}
	t.Logf("%d terms over %d candidates: %v", len(started), candidates, leaders)
	// A waiter's Acquire cancelled by Run's end deletes its record after
	// the call returns (the backends promise no orphans once the server is
	// reachable, not before the cancelled call returns), so wait for none.
	env.waitRecords(t, name, 0)
}

// testResignHandover measures the time from Resign to the next leader's
// OnStarted, handing leadership back and forth between two candidates.
func testResignHandover(t *testing.T, env *env) {
	const runs = 10
	name := uniqueName(t)
	a := env.candidate(t, "resign-a", name, nil)
	first := testutil.Recv(t, a.started, waitTimeout, "OnStarted of resign-a")
	b := env.candidate(t, "resign-b", name, nil)
	leader, next := a, b
	term := first.term
	var handovers, returns []time.Duration
	for range runs {
		env.waitRecords(t, name, 2)
		begin := time.Now()
		if err := leader.e.Resign(context.Background()); err != nil {
			t.Fatalf("%s: Resign() = %v; want nil", leader.id, err)
		}
		returns = append(returns, time.Since(begin))
		st := testutil.Recv(t, next.started, waitTimeout, "OnStarted of "+next.id)
		d := st.at.Sub(begin)
		handovers = append(handovers, d)
		if st.term <= term {
			t.Errorf("%s: term %v after %v; want a higher term", next.id, st.term, term)
		}
		if d > handoverBound {
			t.Errorf("handover from %s to %s took %v; want at most %v", leader.id, next.id, d, handoverBound)
		}
		if sp := testutil.Recv(t, leader.stopped, waitTimeout, "OnStopped of "+leader.id); sp.term != term || sp.err != nil {
			t.Errorf("%s: OnStopped(%v, %v); want OnStopped(%v, nil)", leader.id, sp.term, sp.err, term)
		}
		h, err := a.e.Leader(context.Background())
		if err != nil || h.Identity != next.id || h.Token != st.term {
			t.Errorf("Leader() = %+v, %v; want %s with term %v", h, err, next.id, st.term)
		}
		term = st.term
		leader, next = next, leader
	}
	t.Logf("%s: handover after Resign: %s; Resign returned after %s", env.kind, summary(handovers), summary(returns))
}

// testFailoverAfterKill kills a leader process and measures the time until
// the next candidate's OnStarted.
func testFailoverAfterKill(t *testing.T, env *env) {
	const runs = 5
	var failovers []time.Duration
	for i := range runs {
		name := uniqueName(t)
		child := env.spawn(t, fmt.Sprintf("killed-%d", i), name)
		childTerm := child.expectStarted(t)
		next := env.candidate(t, fmt.Sprintf("next-%d", i), name, nil)
		env.waitRecords(t, name, 2)
		if h, err := next.e.Leader(context.Background()); err != nil || h.Identity != child.id || h.Token != childTerm {
			t.Fatalf("Leader() = %+v, %v; want %s with term %v", h, err, child.id, childTerm)
		}

		killed := time.Now()
		child.kill(t)
		st := testutil.Recv(t, next.started, waitTimeout, "OnStarted after the kill")
		d := st.at.Sub(killed)
		failovers = append(failovers, d)
		if st.term <= childTerm {
			t.Errorf("term %v after the killed leader's %v; want higher", st.term, childTerm)
		}
		if d > sessionTTL+failoverSlack {
			t.Errorf("failover after kill took %v; want at most %v (TTL %v + %v)", d, sessionTTL+failoverSlack, sessionTTL, failoverSlack)
		}
		if n := env.records(name); n != 1 {
			t.Errorf("%d records after failover; want 1 (the killed leader's is gone)", n)
		}
		next.stop(t)
	}
	t.Logf("%s: failover after SIGKILL of the leader (TTL %v): %s", env.kind, sessionTTL, summary(failovers))
}

// testObserveInOrder drives a series of leader changes — a killed process,
// a resignation, two stops — and checks that an observer (Observe) and a
// candidate's OnNewLeader see each leader, in order, and nothing else. Each
// leader is kept until both have seen it: zklock documents that a grant
// shorter than a round trip may go unseen.
func testObserveInOrder(t *testing.T, env *env) {
	name := uniqueName(t)
	watcher, err := lock.NewElection(env.open(t, "observer"), name, lock.ElectionConfig{OnStarted: func(context.Context, fencing.Token) {}})
	if err != nil {
		t.Fatalf("NewElection() = %v; want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, errf, err := watcher.Observe(ctx)
	if err != nil {
		t.Fatalf("Observe() = %v; want nil", err)
	}
	var observed []lock.Holder
	expectObserved := func(want lock.Holder) {
		t.Helper()
		select {
		case h, ok := <-ch:
			if !ok {
				t.Fatalf("observation ended before %+v: %v", want, errf())
			}
			observed = append(observed, h)
			if h != want {
				t.Fatalf("Observe() sent %+v; want %+v (all so far: %+v)", h, want, observed)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("Observe() sent nothing within %v; want %+v (all so far: %+v)", waitTimeout, want, observed)
		}
	}
	newLeaders := make(chan lock.Holder, 100)
	expectNewLeader := func(want lock.Holder) {
		t.Helper()
		if h := testutil.Recv(t, newLeaders, waitTimeout, fmt.Sprintf("OnNewLeader(%+v)", want)); h != want {
			t.Fatalf("OnNewLeader(%+v); want OnNewLeader(%+v)", h, want)
		}
	}

	expectObserved(lock.Holder{}) // no leader yet
	child := env.spawn(t, "obs-0", name)
	leader := lock.Holder{Identity: "obs-0", Token: child.expectStarted(t)}
	expectObserved(leader)

	cands := make([]*cand, 4)
	for i := 1; i <= 3; i++ {
		var mod func(*lock.ElectionConfig)
		if i == 3 {
			mod = func(cfg *lock.ElectionConfig) {
				cfg.OnNewLeader = func(h lock.Holder) { newLeaders <- h }
			}
		}
		cands[i] = env.candidate(t, fmt.Sprintf("obs-%d", i), name, mod)
		env.waitRecords(t, name, i+1)
	}
	expectNewLeader(leader) // obs-3 starts watching while obs-0 leads

	elected := func(c *cand) {
		t.Helper()
		st := testutil.Recv(t, c.started, waitTimeout, "OnStarted of "+c.id)
		leader = lock.Holder{Identity: c.id, Token: st.term}
		expectObserved(leader)
		expectNewLeader(leader)
	}
	child.kill(t)
	elected(cands[1])
	if err := cands[1].e.Resign(context.Background()); err != nil {
		t.Fatalf("Resign() = %v; want nil", err)
	}
	elected(cands[2])
	cands[1].stop(t) // queued again behind obs-3; leaving changes no leader
	cands[2].stop(t)
	elected(cands[3])
	cands[3].stop(t)
	expectObserved(lock.Holder{})

	select {
	case h := <-newLeaders:
		t.Errorf("OnNewLeader(%+v) after obs-3 was elected; want no call (its Run has returned)", h)
	default:
	}
	cancel()
	for h := range ch {
		t.Errorf("Observe() sent %+v after the last change", h)
	}
	if err := errf(); !errors.Is(err, context.Canceled) {
		t.Errorf("observation error = %v; want an error wrapping context.Canceled", err)
	}
}

// testPartitionedLeader cuts the leader off from the cluster and checks
// that its leadership context ends before the next leader's OnStarted.
func testPartitionedLeader(t *testing.T, env *env) {
	const runs = 3
	var stoppedAfter, electedAfter, margins []time.Duration
	for i := range runs {
		name := uniqueName(t)
		proxies := cluster.NewProxies(t, env.c)
		a := env.candidate(t, fmt.Sprintf("cut-%d", i), name, nil, proxies.Endpoints()...)
		st := testutil.Recv(t, a.started, waitTimeout, "OnStarted of the leader to be cut off")
		b := env.candidate(t, fmt.Sprintf("other-%d", i), name, nil)
		env.waitRecords(t, name, 2)

		before := proxies.Stats()
		cut := time.Now()
		proxies.Blackhole()
		lost := testutil.Recv(t, a.ctxDone, waitTimeout, "end of the cut-off leader's context")
		elected := testutil.Recv(t, b.started, waitTimeout, "OnStarted of the next leader")
		if !errors.Is(lost.err, lock.ErrLost) {
			t.Errorf("context.Cause(leadership ctx) = %v; want an error wrapping ErrLost", lost.err)
		}
		if !lost.at.Before(elected.at) {
			t.Errorf("cut-off leader's context ended %v after the cut, next leader elected %v after it; want the end first",
				lost.at.Sub(cut), elected.at.Sub(cut))
		}
		if elected.term <= st.term {
			t.Errorf("next term %v; want above %v", elected.term, st.term)
		}
		if sp := testutil.Recv(t, a.stopped, waitTimeout, "OnStopped of the cut-off leader"); sp.term != st.term || !errors.Is(sp.err, lock.ErrLost) {
			t.Errorf("OnStopped(%v, %v); want OnStopped(%v, an error wrapping ErrLost)", sp.term, sp.err, st.term)
		}
		if after := proxies.Stats(); after.HeldWhileBlackholed <= before.HeldWhileBlackholed {
			t.Errorf("proxies held %d bytes while blackholed; want some (the partition did not happen)", after.HeldWhileBlackholed)
		}
		stoppedAfter = append(stoppedAfter, lost.at.Sub(cut))
		electedAfter = append(electedAfter, elected.at.Sub(cut))
		margins = append(margins, elected.at.Sub(lost.at))
		proxies.Heal()
		a.stop(t)
		b.stop(t)
	}
	t.Logf("%s: partitioned leader stopped %s after the cut; next leader elected %s after it; margin between the two: min %v",
		env.kind, summary(stoppedAfter), summary(electedAfter), slices.Min(margins).Round(time.Millisecond))
}
