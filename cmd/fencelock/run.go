package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// run implements "fencelock run".
func (a *app) run(ctx context.Context, c *common, args []string) error {
	fset := newFlagSet("run")
	c.register(fset)
	var req request
	fset.Func("lock", "lock name (repeatable)", func(name string) error {
		req.names = append(req.names, name)
		return nil
	})
	try := fset.Bool("try", false, "do not wait")
	wait := fset.Duration("wait", 0, "maximum wait")
	grace := fset.Duration("grace", 10*time.Second, "SIGTERM to SIGKILL")
	fset.BoolVar(&req.shared, "shared", false, "take a shared (read) grant")
	fset.IntVar(&req.limit, "limit", 0, "take one of N semaphore permits")
	if err := fset.Parse(args); err != nil {
		return a.flagError("run", err)
	}
	argv := fset.Args()
	if err := req.check(fset, argv, *try, *wait, *grace); err != nil {
		return err
	}

	h, l, err := a.acquire(ctx, c, req, *try, *wait)
	if err != nil {
		return err
	}
	defer l.Close()
	if c.verbose {
		for _, le := range leasesOf(h) {
			fmt.Fprintf(a.stderr, "fencelock: holding %s %q with token %d\n", req, le.Name(), le.Token())
		}
	}

	status, runErr := a.supervise(h, argv, *grace)

	rctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	relErr := h.Release(rctx)
	if c.verbose && relErr == nil {
		fmt.Fprintf(a.stderr, "fencelock: released %s\n", req.quoted())
	}
	if runErr != nil {
		return runErr
	}
	if relErr != nil && !errors.Is(relErr, lock.ErrLost) {
		// The command finished under the lock; the release failing only
		// delays the next holder until the backend expires the session.
		fmt.Fprintf(a.stderr, "fencelock: warning: release %s: %v\n", req.quoted(), relErr)
	}
	if status != 0 {
		return &failure{code: status}
	}
	return nil
}

// request is the grant run asks for: the exclusive lock of every name (the
// zero kind), a shared grant (--shared) or one of limit semaphore permits
// (--limit) of its one name.
type request struct {
	names  []string // one per --lock, in the order given
	shared bool
	limit  int // > 0 for a semaphore permit
}

// check refuses, as bad usage, a request and flags that do not go
// together, before any backend is contacted.
func (r request) check(fset *flag.FlagSet, argv []string, try bool, wait, grace time.Duration) error {
	limitGiven := false
	fset.Visit(func(f *flag.Flag) { limitGiven = limitGiven || f.Name == "limit" })
	switch {
	case len(r.names) == 0:
		return usageError("run: --lock NAME is required")
	case len(argv) == 0:
		return usageError("run: no command given (fencelock run --lock NAME -- COMMAND [ARG...])")
	case wait < 0:
		return usageError("run: --wait %v: must not be negative", wait)
	case grace <= 0:
		return usageError("run: --grace %v: must be positive", grace)
	case try && wait > 0:
		return usageError("run: give --try or --wait, not both")
	case limitGiven && r.limit < 1:
		return usageError("run: --limit %d: must be at least 1", r.limit)
	case r.shared && limitGiven:
		return usageError("run: give --shared or --limit, not both")
	case len(r.names) > 1 && (r.shared || limitGiven):
		return usageError("run: --shared and --limit take one --lock; several --lock are held as exclusive locks")
	}
	vars := map[string]string{}
	for _, name := range r.names {
		if err := lock.ValidateName(name); err != nil {
			return &failure{code: exitUsage, err: err}
		}
		v := tokenVar(name)
		switch other, ok := vars[v]; {
		case ok && other == name:
			return usageError("run: --lock %q given twice", name)
		case ok:
			return usageError("run: --lock %q and --lock %q would both pass their token as %s; rename one", other, name, v)
		}
		vars[v] = name
	}
	return nil
}

// String names the kind of grant in messages.
func (r request) String() string {
	switch {
	case r.limit > 0:
		return fmt.Sprintf("a permit (limit %d) of", r.limit)
	case r.shared:
		return "a shared grant of"
	}
	return "the lock"
}

// quoted is the name quoted, or the list of names.
func (r request) quoted() string {
	if len(r.names) == 1 {
		return strconv.Quote(r.names[0])
	}
	return fmt.Sprintf("%q", r.names)
}

// label is "lock" or "locks" followed by quoted.
func (r request) label() string {
	if len(r.names) == 1 {
		return "lock " + r.quoted()
	}
	return "locks " + r.quoted()
}

// held is what run holds while the command runs: the lease of its one
// --lock, or the *lock.MultiLease of several.
type held interface {
	Done() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
}

// leasesOf returns the leases h holds, one per name, sorted by name.
func leasesOf(h held) []lock.Lease {
	if m, ok := h.(*lock.MultiLease); ok {
		return m.Leases()
	}
	return []lock.Lease{h.(lock.Lease)}
}

// acquireFunc takes the grant a request asks for.
type acquireFunc func(ctx context.Context) (held, error)

// calls returns the calls of l that take the grant r asks for, waiting and
// not waiting. It fails when l lacks the optional interface they belong
// to: the backend cannot take that kind of grant.
func (r request) calls(l lock.Locker) (acquire, try acquireFunc, err error) {
	one := func(f func(context.Context, string) (lock.Lease, error)) acquireFunc {
		return func(ctx context.Context) (held, error) {
			le, err := f(ctx, r.names[0])
			if err != nil {
				return nil, err
			}
			return le, nil
		}
	}
	switch {
	case len(r.names) > 1:
		all := func(f func(context.Context, lock.Locker, ...string) (*lock.MultiLease, error)) acquireFunc {
			return func(ctx context.Context) (held, error) {
				m, err := f(ctx, l, r.names...)
				if err != nil {
					return nil, err
				}
				return m, nil
			}
		}
		return all(lock.AcquireAll), all(lock.TryAcquireAll), nil
	case r.limit > 0:
		s, ok := l.(lock.Semaphore)
		if !ok {
			return nil, nil, fmt.Errorf("run --limit: this backend offers no semaphores (its Locker, %T, does not implement lock.Semaphore)", l)
		}
		acquire = one(func(ctx context.Context, name string) (lock.Lease, error) {
			return s.AcquireSemaphore(ctx, name, r.limit)
		})
		try = one(func(ctx context.Context, name string) (lock.Lease, error) {
			return s.TryAcquireSemaphore(ctx, name, r.limit)
		})
		return acquire, try, nil
	case r.shared:
		s, ok := l.(lock.SharedLocker)
		if !ok {
			return nil, nil, fmt.Errorf("run --shared: this backend offers no shared locks (its Locker, %T, does not implement lock.SharedLocker)", l)
		}
		return one(s.AcquireShared), one(s.TryAcquireShared), nil
	}
	return one(l.Acquire), one(l.TryAcquire), nil
}

// acquire opens the Locker and takes the grant req asks for, waiting as
// --try and --wait say. A signal while waiting ends the wait.
func (a *app) acquire(ctx context.Context, c *common, req request, try bool, wait time.Duration) (held, lock.Locker, error) {
	ictx, stop := a.interruptible(ctx)
	defer stop()
	interrupted := func(err error) error {
		if s := stop(); s != nil {
			return fail(signalStatus(s), "run: interrupted by %v while waiting for %s", s, req.label())
		}
		return err
	}
	l, err := a.open(ictx, c)
	if err != nil {
		return nil, nil, interrupted(err)
	}
	acquireCall, tryCall, err := req.calls(l)
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	var h held
	if try {
		tctx, cancel := context.WithTimeout(ictx, c.timeout)
		h, err = tryCall(tctx)
		cancel()
	} else {
		if _, err = a.holderOf(ictx, c, l, req.names[0]); err != nil && !errors.Is(err, lock.ErrNotHeld) {
			l.Close()
			return nil, nil, interrupted(err)
		}
		actx, cancel := ictx, context.CancelFunc(func() {})
		if wait > 0 {
			actx, cancel = context.WithTimeout(ictx, wait)
		}
		h, err = acquireCall(actx)
		if err != nil && ictx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: still held after waiting %v", lock.ErrLocked, wait)
		}
		cancel()
	}
	if err != nil {
		defer l.Close()
		switch {
		case errors.Is(err, lock.ErrLocked):
			msg := a.notGranted(context.WithoutCancel(ictx), c, l, req)
			return nil, nil, interrupted(fail(exitHeld, "run: %s; not running the command", msg))
		case errors.Is(err, lock.ErrInvalidName) || errors.Is(err, lock.ErrInvalidConfig):
			// An invalid name, or a limit beyond what the backend accepts.
			return nil, nil, &failure{code: exitUsage, err: err}
		}
		return nil, nil, interrupted(fmt.Errorf("run: acquire %s: %w", req.quoted(), err))
	}
	if s := stop(); s != nil {
		// The signal came as the lock was granted: do not start the command.
		rctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		h.Release(rctx)
		cancel()
		l.Close()
		return nil, nil, fail(signalStatus(s), "run: interrupted by %v while waiting for %s", s, req.label())
	}
	return h, l, nil
}

// notGranted says why req was not granted, from the holders of its names
// as they are now: the exclusive holder of the first name held, or the
// reason a shared grant or a permit had to wait.
func (a *app) notGranted(ctx context.Context, c *common, l lock.Locker, req request) string {
	for _, name := range req.names {
		if hs, err := a.holdersOf(ctx, c, l, name); err == nil && len(hs) > 0 {
			return heldBy(name, hs, req)
		}
	}
	// The holders could not be read, or left since.
	if len(req.names) > 1 {
		return fmt.Sprintf("one of the %s is held by another holder", req.label())
	}
	return fmt.Sprintf("%s is held by another holder", req.label())
}

// heldBy says why hs, the holders of name, keep req waiting.
func heldBy(name string, hs []lock.Holder, req request) string {
	switch {
	case !hs[0].Shared:
		return fmt.Sprintf("lock %q is held by %s", name, formatHolder(hs[0]))
	case req.limit > 0:
		return fmt.Sprintf("semaphore %q has no free permit (%d of %d held)", name, len(hs), req.limit)
	}
	readers := fmt.Sprintf("%d readers", len(hs))
	if len(hs) == 1 {
		readers = "1 reader"
	}
	if req.shared {
		// Readers hold it, but a writer queued before this request, and a
		// shared request does not overtake it.
		return fmt.Sprintf("lock %q is held by %s and a writer waits for it", name, readers)
	}
	return fmt.Sprintf("lock %q is held by %s", name, readers)
}

// supervise runs argv while h is held and returns its exit status. If h
// ends first, it stops the command's process group (SIGTERM, then SIGKILL
// after grace) and returns a failure with exitLost.
func (a *app) supervise(h held, argv []string, grace time.Duration) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = a.stdin
	cmd.Stdout = a.stdout
	cmd.Stderr = a.stderr
	cmd.Env = commandEnv(a.environ, leasesOf(h))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		code := exitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		return 0, &failure{code: code, err: fmt.Errorf("run: %w", err)}
	}
	pgid := cmd.Process.Pid
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()

	var (
		done    = h.Done()
		lostErr error
		kill    <-chan time.Time
	)
	for {
		select {
		case <-waitc:
			status := cmd.ProcessState.ExitCode()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				status = 128 + int(ws.Signal())
			}
			if lostErr != nil {
				return status, &failure{code: exitLost, err: lostErr}
			}
			return status, nil
		case <-done:
			done = nil
			lostErr = fmt.Errorf("run: lost lock %q while the command ran (%v); stopped the command", lostName(h), h.Err())
			syscall.Kill(-pgid, syscall.SIGTERM)
			timer := time.NewTimer(grace)
			defer timer.Stop()
			kill = timer.C
		case <-kill:
			kill = nil
			syscall.Kill(-pgid, syscall.SIGKILL)
		case s := <-a.signals:
			if n, ok := s.(syscall.Signal); ok {
				syscall.Kill(-pgid, n)
			}
		}
	}
}

// lostName is the name whose loss ended h.
func lostName(h held) string {
	leases := leasesOf(h)
	for _, le := range leases {
		if errors.Is(le.Err(), lock.ErrLost) {
			return le.Name()
		}
	}
	return leases[0].Name()
}

// commandEnv is environ with the variables that pass leases to the
// command: FENCELOCK_LOCKS, the names separated by spaces, and for each
// name its token in tokenVar(name); with one lease also FENCING_TOKEN and
// FENCELOCK_LOCK, which with several are removed if inherited, so that no
// resource gets a token that is not its own name's.
func commandEnv(environ []string, leases []lock.Lease) []string {
	env := slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		return strings.HasPrefix(kv, "FENCING_TOKEN=") || strings.HasPrefix(kv, "FENCELOCK_LOCK=")
	})
	names := make([]string, len(leases))
	for i, le := range leases {
		names[i] = le.Name()
		env = append(env, tokenVar(le.Name())+"="+le.Token().String())
	}
	env = append(env, "FENCELOCK_LOCKS="+strings.Join(names, " "))
	if len(leases) == 1 {
		env = append(env, "FENCING_TOKEN="+leases[0].Token().String(), "FENCELOCK_LOCK="+leases[0].Name())
	}
	return env
}

// tokenVar is the variable that passes the token of the lock name to the
// command: FENCING_TOKEN_ followed by name in upper case with every byte
// other than a letter or a digit turned into '_' ("account/a-1" gives
// FENCING_TOKEN_ACCOUNT_A_1).
func tokenVar(name string) string {
	return "FENCING_TOKEN_" + strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToUpper(name))
}
