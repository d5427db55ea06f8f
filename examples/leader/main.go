// Command leader is a worker that does its work only while it is the
// elected leader, using the election helper of package lock.
//
//	leader --url etcd://127.0.0.1:2379/myapp --election workers/indexer --id node-1
//
// Start several: one is elected and works, the others stand by and report
// who leads. Stop the leader with Ctrl-C or SIGTERM and it resigns: the next
// candidate is elected within a round trip. Kill it and the next one is
// elected once the lock server expires the dead leader's session.
//
// The leader's work here is a tick every --tick, printed as
//
//	<id>: leading (term <T>): tick <K>
//
// A real worker would send the term (the lease's fencing token) with every
// write it makes, and have the resource refuse writes from older terms (see
// package fencing and the inventory example): a leader can be deposed while
// it is in the middle of a write.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	_ "github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/examples/internal/exutil"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
	_ "github.com/fencelock/fencelock/zklock"
)

func main() {
	ctx, stop := exutil.SignalContext()
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("leader", flag.ContinueOnError)
	urlFlag := fs.String("url", "", "lock backend URL (default $FENCELOCK_URL)")
	election := fs.String("election", "workers/leader", "election (lock) name")
	id := fs.String("id", exutil.DefaultID(), "this candidate's name")
	tick := fs.Duration("tick", time.Second, "interval of the leader's work")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := exutil.URL(*urlFlag)
	if err != nil {
		return err
	}
	if *tick <= 0 {
		return errors.New("--tick must be positive")
	}
	if url, err = exutil.WithIdentity(url, *id); err != nil {
		return err
	}
	locker, err := lock.Open(ctx, url)
	if err != nil {
		return err
	}
	defer locker.Close()

	// The callbacks run on the election's goroutines; one mutex keeps
	// their lines whole.
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, "%s: %s\n", *id, fmt.Sprintf(format, args...))
	}

	e, err := lock.NewElection(locker, *election, lock.ElectionConfig{
		OnStarted: func(ctx context.Context, term fencing.Token) {
			say("leading (term %d)", term)
			t := time.NewTicker(*tick)
			defer t.Stop()
			for k := 1; ; k++ {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					say("leading (term %d): tick %d", term, k)
				}
			}
		},
		OnStopped: func(term fencing.Token, err error) {
			if err != nil {
				say("stepped down (term %d): %v", term, err)
				return
			}
			say("stepped down (term %d)", term)
		},
		OnNewLeader: func(h lock.Holder) {
			if h.Token == 0 {
				say("no leader")
				return
			}
			say("the leader is %s (term %d)", h.Identity, h.Token)
		},
		OnError: func(err error) { say("campaign error: %v", err) },
	})
	if err != nil {
		return err
	}
	say("campaigning in %s", *election)
	if err := e.Run(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
