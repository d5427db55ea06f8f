package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os/exec"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// run implements "fencelock run".
func (a *app) run(ctx context.Context, c *common, args []string) error {
	fset := newFlagSet("run")
	c.register(fset)
	name := fset.String("lock", "", "lock name")
	try := fset.Bool("try", false, "do not wait")
	wait := fset.Duration("wait", 0, "maximum wait")
	grace := fset.Duration("grace", 10*time.Second, "SIGTERM to SIGKILL")
	var req request
	fset.BoolVar(&req.shared, "shared", false, "take a shared (read) grant")
	fset.IntVar(&req.limit, "limit", 0, "take one of N semaphore permits")
	if err := fset.Parse(args); err != nil {
		return a.flagError("run", err)
	}
	limitGiven := false
	fset.Visit(func(f *flag.Flag) { limitGiven = limitGiven || f.Name == "limit" })
	argv := fset.Args()
	switch {
	case *name == "":
		return usageError("run: --lock NAME is required")
	case len(argv) == 0:
		return usageError("run: no command given (fencelock run --lock NAME -- COMMAND [ARG...])")
	case *wait < 0:
		return usageError("run: --wait %v: must not be negative", *wait)
	case *grace <= 0:
		return usageError("run: --grace %v: must be positive", *grace)
	case *try && *wait > 0:
		return usageError("run: give --try or --wait, not both")
	case limitGiven && req.limit < 1:
		return usageError("run: --limit %d: must be at least 1", req.limit)
	case req.shared && limitGiven:
		return usageError("run: give --shared or --limit, not both")
	}
	if err := lock.ValidateName(*name); err != nil {
		return &failure{code: exitUsage, err: err}
	}

	lease, l, err := a.acquire(ctx, c, *name, req, *try, *wait)
	if err != nil {
		return err
	}
	defer l.Close()
	if c.verbose {
		fmt.Fprintf(a.stderr, "fencelock: holding %s %q with token %d\n", req, *name, lease.Token())
	}

	status, runErr := a.supervise(lease, argv, *grace)

	rctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	relErr := lease.Release(rctx)
	if c.verbose && relErr == nil {
		fmt.Fprintf(a.stderr, "fencelock: released %q\n", *name)
	}
	if runErr != nil {
		return runErr
	}
	if relErr != nil && !errors.Is(relErr, lock.ErrLost) {
		// The command finished under the lock; the release failing only
		// delays the next holder until the backend expires the session.
		fmt.Fprintf(a.stderr, "fencelock: warning: release %q: %v\n", *name, relErr)
	}
	if status != 0 {
		return &failure{code: status}
	}
	return nil
}

// request is the grant run asks for: the exclusive lock (the zero value),
// a shared grant (--shared) or one of limit semaphore permits (--limit).
type request struct {
	shared bool
	limit  int // > 0 for a semaphore permit
}

// String names the grant in messages.
func (r request) String() string {
	switch {
	case r.limit > 0:
		return fmt.Sprintf("a permit (limit %d) of", r.limit)
	case r.shared:
		return "a shared grant of"
	}
	return "the lock"
}

// acquireFunc is the signature of Locker.TryAcquire and Locker.Acquire, and
// of the shared and semaphore calls with the limit bound.
type acquireFunc func(ctx context.Context, name string) (lock.Lease, error)

// calls returns the calls of l that take the grant r asks for, waiting and
// not waiting. It fails when l lacks the optional interface they belong
// to: the backend cannot take that kind of grant.
func (r request) calls(l lock.Locker) (acquire, try acquireFunc, err error) {
	switch {
	case r.limit > 0:
		s, ok := l.(lock.Semaphore)
		if !ok {
			return nil, nil, fmt.Errorf("run --limit: this backend offers no semaphores (its Locker, %T, does not implement lock.Semaphore)", l)
		}
		acquire = func(ctx context.Context, name string) (lock.Lease, error) {
			return s.AcquireSemaphore(ctx, name, r.limit)
		}
		try = func(ctx context.Context, name string) (lock.Lease, error) {
			return s.TryAcquireSemaphore(ctx, name, r.limit)
		}
		return acquire, try, nil
	case r.shared:
		s, ok := l.(lock.SharedLocker)
		if !ok {
			return nil, nil, fmt.Errorf("run --shared: this backend offers no shared locks (its Locker, %T, does not implement lock.SharedLocker)", l)
		}
		return s.AcquireShared, s.TryAcquireShared, nil
	}
	return l.Acquire, l.TryAcquire, nil
}

// acquire opens the Locker and takes the grant req asks for, waiting as
// --try and --wait say. A signal while waiting ends the wait.
func (a *app) acquire(ctx context.Context, c *common, name string, req request, try bool, wait time.Duration) (lock.Lease, lock.Locker, error) {
	ictx, stop := a.interruptible(ctx)
	defer stop()
	interrupted := func(err error) error {
		if s := stop(); s != nil {
			return fail(signalStatus(s), "run: interrupted by %v while waiting for lock %q", s, name)
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
	var lease lock.Lease
	if try {
		tctx, cancel := context.WithTimeout(ictx, c.timeout)
		lease, err = tryCall(tctx, name)
		cancel()
	} else {
		if _, err = a.holderOf(ictx, c, l, name); err != nil && !errors.Is(err, lock.ErrNotHeld) {
			l.Close()
			return nil, nil, interrupted(err)
		}
		actx, cancel := ictx, context.CancelFunc(func() {})
		if wait > 0 {
			actx, cancel = context.WithTimeout(ictx, wait)
		}
		lease, err = acquireCall(actx, name)
		if err != nil && ictx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: still held after waiting %v", lock.ErrLocked, wait)
		}
		cancel()
	}
	if err != nil {
		if errors.Is(err, lock.ErrLocked) {
			msg := a.notGranted(context.WithoutCancel(ictx), c, l, name, req)
			l.Close()
			return nil, nil, interrupted(fail(exitHeld, "run: %s; not running the command", msg))
		}
		l.Close()
		if errors.Is(err, lock.ErrInvalidName) || errors.Is(err, lock.ErrInvalidConfig) {
			// An invalid name, or a limit beyond what the backend accepts.
			return nil, nil, &failure{code: exitUsage, err: err}
		}
		return nil, nil, interrupted(fmt.Errorf("run: acquire %q: %w", name, err))
	}
	if s := stop(); s != nil {
		// The signal came as the lock was granted: do not start the command.
		rctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		lease.Release(rctx)
		cancel()
		l.Close()
		return nil, nil, fail(signalStatus(s), "run: interrupted by %v while waiting for lock %q", s, name)
	}
	return lease, l, nil
}

// notGranted says why req was not granted, from the holders of name as
// they are now: the exclusive holder, or the reason a shared grant or a
// permit had to wait.
func (a *app) notGranted(ctx context.Context, c *common, l lock.Locker, name string, req request) string {
	hs, err := a.holdersOf(ctx, c, l, name)
	switch {
	case err != nil || len(hs) == 0:
		// The holders could not be read, or left since.
		return fmt.Sprintf("lock %q is held by another holder", name)
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

// supervise runs argv while lease is held and returns its exit status. If
// the lease ends first, it stops the command's process group (SIGTERM,
// then SIGKILL after grace) and returns a failure with exitLost.
func (a *app) supervise(lease lock.Lease, argv []string, grace time.Duration) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = a.stdin
	cmd.Stdout = a.stdout
	cmd.Stderr = a.stderr
	cmd.Env = append(append([]string(nil), a.environ...),
		"FENCING_TOKEN="+lease.Token().String(),
		"FENCELOCK_LOCK="+lease.Name(),
	)
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
		done    = lease.Done()
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
			lostErr = fmt.Errorf("run: lost lock %q while the command ran (%v); stopped the command", lease.Name(), lease.Err())
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
