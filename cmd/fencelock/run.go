package main

import (
	"context"
	"errors"
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
	if err := fset.Parse(args); err != nil {
		return a.flagError("run", err)
	}
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
	}
	if err := lock.ValidateName(*name); err != nil {
		return &failure{code: exitUsage, err: err}
	}

	lease, l, err := a.acquire(ctx, c, *name, *try, *wait)
	if err != nil {
		return err
	}
	defer l.Close()
	if c.verbose {
		fmt.Fprintf(a.stderr, "fencelock: holding %q with token %d\n", *name, lease.Token())
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

// acquire opens the Locker and takes the lock, waiting as --try and --wait
// say. A signal while waiting ends the wait.
func (a *app) acquire(ctx context.Context, c *common, name string, try bool, wait time.Duration) (lock.Lease, lock.Locker, error) {
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
	var lease lock.Lease
	if try {
		tctx, cancel := context.WithTimeout(ictx, c.timeout)
		lease, err = l.TryAcquire(tctx, name)
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
		lease, err = l.Acquire(actx, name)
		if err != nil && ictx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: still held after waiting %v", lock.ErrLocked, wait)
		}
		cancel()
	}
	if err != nil {
		if errors.Is(err, lock.ErrLocked) {
			msg := "held by another holder"
			if h, herr := a.holderOf(context.WithoutCancel(ictx), c, l, name); herr == nil {
				msg = "held by " + formatHolder(h)
			}
			l.Close()
			return nil, nil, interrupted(fail(exitHeld, "run: lock %q is %s; not running the command", name, msg))
		}
		l.Close()
		if errors.Is(err, lock.ErrInvalidName) {
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
