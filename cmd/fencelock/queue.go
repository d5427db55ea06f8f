package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// queue implements "fencelock queue NAME".
func (a *app) queue(ctx context.Context, c *common, args []string) error {
	fset := newFlagSet("queue")
	c.register(fset)
	pos, err := parseInterspersed(fset, args)
	if err != nil {
		return a.flagError("queue", err)
	}
	name, err := oneName("queue", pos)
	if err != nil {
		return err
	}
	ictx, stop := a.interruptible(ctx)
	defer stop()
	l, err := a.open(ictx, c)
	if err != nil {
		return err
	}
	defer l.Close()
	ql, ok := l.(lock.QueueLister)
	if !ok {
		return fmt.Errorf("queue: this backend cannot list a lock's queue")
	}
	qctx, cancel := context.WithTimeout(ictx, c.timeout)
	defer cancel()
	es, err := ql.Queue(qctx, name)
	switch {
	case err == nil && len(es) == 0:
		return fail(exitFree, "lock %q is free and nobody waits for it", name)
	case errors.Is(err, lock.ErrInvalidName):
		return &failure{code: exitUsage, err: err}
	case err != nil:
		if s := stop(); s != nil {
			return fail(signalStatus(s), "interrupted by %v", s)
		}
		return fmt.Errorf("cannot reach the backend: %w", err)
	}
	var b strings.Builder
	for _, e := range es {
		b.WriteString(formatEntry(e))
		b.WriteByte('\n')
	}
	fmt.Fprint(a.stdout, b.String())
	return nil
}

// formatEntry is one line of "fencelock queue": the position, held or
// waiting, the holder line of the request, and when it was made if the
// backend knows.
func formatEntry(e lock.QueueEntry) string {
	state := "waiting"
	if e.Held {
		state = "held"
	}
	line := fmt.Sprintf("position=%d %s %s", e.Position, state, formatHolder(e.Holder))
	if !e.Since.IsZero() {
		line += " since=" + e.Since.UTC().Format(time.RFC3339Nano)
	}
	return line
}
