package interoptest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/internal/foreign"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// The holder process's URL and lock name.
const (
	holderURLEnv  = "FENCELOCK_INTEROP_HOLDER_URL"
	holderNameEnv = "FENCELOCK_INTEROP_HOLDER_NAME"
)

// TestZKFencelockHolderProcess is the body of the fencelock holder
// process of TestZKHolderEnds/fencelock-killed: with a URL and a name in its
// environment it opens the URL, acquires the name, writes "held TOKEN"
// and blocks until it is killed. Run on its own it does nothing.
func TestZKFencelockHolderProcess(t *testing.T) {
	url := os.Getenv(holderURLEnv)
	if url == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := lock.Open(ctx, url)
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(2)
	}
	le, err := l.Acquire(ctx, os.Getenv(holderNameEnv))
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(2)
	}
	fmt.Printf("held %d\n", le.Token())
	select {} // until SIGKILL
}

// holderProc is a fencelock Locker in a process of its own, as the
// holder of a handoff: Lock starts it and returns its token.
type holderProc struct {
	t         *testing.T
	url, name string
	p         *testutil.Proc
}

func (h *holderProc) Name() string { return "fencelock-process" }

func (h *holderProc) Lock(ctx context.Context) (int64, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestZKFencelockHolderProcess$", "-test.v")
	cmd.Env = append(os.Environ(), holderURLEnv+"="+h.url, holderNameEnv+"="+h.name)
	h.p = testutil.StartProc(h.t, cmd, testutil.ProcConfig{DropLines: true})
	for {
		select {
		case line, ok := <-h.p.Lines:
			if !ok {
				return 0, fmt.Errorf("holder process ended before holding: %s", h.p.Stdout.String())
			}
			if rest, ok := strings.CutPrefix(line, "held "); ok {
				return strconv.ParseInt(rest, 10, 64)
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (h *holderProc) Unlock(context.Context) error {
	return fmt.Errorf("the holder process never unlocks")
}

// fencelockKilled: a fencelock holder process SIGKILLed hands the lock
// to a Curator waiter once the servers dropped its record at its
// session's expiry.
func fencelockKilled(t *testing.T, e *env) {
	name, path := e.dir(t)
	holder := &holderProc{t: t, name: name, url: fmt.Sprintf("zk://%s%s?session_timeout=%v&layout=%s",
		strings.Join(e.c.Endpoints(), ","), e.root, sessionTimeout, zklock.LayoutCurator)}
	waiter := foreign.Fleet(t, e.c, foreign.CuratorMutex, path, 1, foreign.Options{})[0]
	e.handoff(t, path, holder, waiter, func(t *testing.T) {
		if err := holder.p.Cmd.Process.Kill(); err != nil {
			t.Fatalf("kill the holder process: %v", err)
		}
		if code := holder.p.Code(); code != 137 {
			t.Fatalf("the holder process exited with status %d; want 137 (SIGKILL)", code)
		}
	})
	if err := waiter.Unlock(ctxOf(t)); err != nil {
		t.Errorf("Unlock(%s) = %v", waiter.Name(), err)
	}
	e.closeAll(t, path, waiter)
}
