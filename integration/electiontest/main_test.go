package electiontest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"

	_ "github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/leakcheck"
	"github.com/fencelock/fencelock/lock"
	_ "github.com/fencelock/fencelock/zklock"
)

// Environment variables that switch the test binary into candidate mode.
const (
	candidateEnvURL  = "FENCELOCK_ELECTIONTEST_CANDIDATE_URL"
	candidateEnvName = "FENCELOCK_ELECTIONTEST_CANDIDATE_NAME"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(candidateEnvURL); url != "" {
		os.Exit(runCandidate(url, os.Getenv(candidateEnvName), os.Stdin, os.Stdout))
	}
	leakcheck.Main(m)
}

// runCandidate is the body of a candidate process: it campaigns in the
// election called name through a Locker opened from url, reporting each
// term on out as "started <term>" and "stopped <term> <error>", until in
// reaches EOF (the test closed it, or the test process died).
func runCandidate(url, name string, in io.Reader, out io.Writer) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	l, err := lock.Open(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		return 2
	}
	defer l.Close()
	var mu sync.Mutex
	w := bufio.NewWriter(out)
	emit := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format+"\n", args...)
		_ = w.Flush()
	}
	e, err := lock.NewElection(l, name, lock.ElectionConfig{
		OnStarted: func(ctx context.Context, term fencing.Token) {
			emit("started %d", term)
			<-ctx.Done()
		},
		OnStopped: func(term fencing.Token, err error) { emit("stopped %d %v", term, err) },
		OnError:   func(err error) { fmt.Fprintln(os.Stderr, "candidate:", err) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		return 2
	}
	err = e.Run(ctx)
	if ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "candidate: Run:", err)
		return 1
	}
	return 0
}
