package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fencelock/lock"
)

// holder implements "fencelock holder NAME".
func (a *app) holder(ctx context.Context, c *common, args []string) error {
	fset := newFlagSet("holder")
	c.register(fset)
	pos, err := parseInterspersed(fset, args)
	if err != nil {
		return a.flagError("holder", err)
	}
	name, err := oneName("holder", pos)
	if err != nil {
		return err
	}
	return a.printHolders(ctx, c, name)
}

// leader implements "fencelock leader NAME [--watch]".
func (a *app) leader(ctx context.Context, c *common, args []string) error {
	fset := newFlagSet("leader")
	c.register(fset)
	watch := fset.Bool("watch", false, "follow changes")
	pos, err := parseInterspersed(fset, args)
	if err != nil {
		return a.flagError("leader", err)
	}
	name, err := oneName("leader", pos)
	if err != nil {
		return err
	}
	if !*watch {
		return a.printHolder(ctx, c, name, "election %q has no leader")
	}

	ictx, stop := a.interruptible(ctx)
	defer stop()
	l, err := a.open(ictx, c)
	if err != nil {
		if stop() != nil {
			return nil
		}
		return err
	}
	defer l.Close()
	obs, ok := l.(lock.Observer)
	if !ok {
		return fmt.Errorf("leader: this backend cannot watch a lock")
	}
	// Observe's first answer may wait on an unreachable backend for ever;
	// a bounded read first turns that into an error.
	if _, err := a.holderOf(ictx, c, l, name); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		if stop() != nil {
			return nil
		}
		return fmt.Errorf("leader: %w", err)
	}
	changes, errf, err := obs.Observe(ictx, name)
	if err != nil {
		if stop() != nil {
			return nil
		}
		return fmt.Errorf("leader: watch %q: %w", name, err)
	}
	for h := range changes {
		fmt.Fprintln(a.stdout, formatHolder(h))
	}
	err = errf()
	if stop() != nil {
		return nil // interrupted: the normal end of a watch
	}
	return fmt.Errorf("leader: watch %q ended: %w", name, err)
}

// printHolder prints the holder of name, or fails with exitFree.
func (a *app) printHolder(ctx context.Context, c *common, name, freeMsg string) error {
	ictx, stop := a.interruptible(ctx)
	defer stop()
	l, err := a.open(ictx, c)
	if err != nil {
		return err
	}
	defer l.Close()
	h, err := a.holderOf(ictx, c, l, name)
	switch {
	case errors.Is(err, lock.ErrNotHeld):
		return fail(exitFree, freeMsg, name)
	case errors.Is(err, lock.ErrInvalidName):
		return &failure{code: exitUsage, err: err}
	case err != nil:
		if s := stop(); s != nil {
			return fail(signalStatus(s), "interrupted by %v", s)
		}
		return err
	}
	fmt.Fprintln(a.stdout, formatHolder(h))
	return nil
}

// printHolders prints every holder of name, one line each in grant
// order, or fails with exitFree.
func (a *app) printHolders(ctx context.Context, c *common, name string) error {
	ictx, stop := a.interruptible(ctx)
	defer stop()
	l, err := a.open(ictx, c)
	if err != nil {
		return err
	}
	defer l.Close()
	hs, err := a.holdersOf(ictx, c, l, name)
	switch {
	case err == nil && len(hs) == 0, errors.Is(err, lock.ErrNotHeld):
		return fail(exitFree, "lock %q is free", name)
	case errors.Is(err, lock.ErrInvalidName):
		return &failure{code: exitUsage, err: err}
	case err != nil:
		if s := stop(); s != nil {
			return fail(signalStatus(s), "interrupted by %v", s)
		}
		return err
	}
	var b strings.Builder
	for _, h := range hs {
		b.WriteString(formatHolder(h))
		b.WriteByte('\n')
	}
	fmt.Fprint(a.stdout, b.String())
	return nil
}

// holdersOf lists the holders of name in grant order within the request
// timeout. A backend that cannot list them (its Locker is no
// lock.HolderLister) reports its earliest holder, which for an exclusive
// lock is the whole answer. A free lock gives an empty list or an error
// wrapping lock.ErrNotHeld.
func (a *app) holdersOf(ctx context.Context, c *common, l lock.Locker, name string) ([]lock.Holder, error) {
	hl, ok := l.(lock.HolderLister)
	if !ok {
		h, err := a.holderOf(ctx, c, l, name)
		if err != nil {
			return nil, err
		}
		return []lock.Holder{h}, nil
	}
	hctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	hs, err := hl.Holders(hctx, name)
	if err != nil && ctx.Err() == nil && !errors.Is(err, lock.ErrInvalidName) {
		return nil, fmt.Errorf("cannot reach the backend: %w", err)
	}
	return hs, err
}

// oneName checks that pos is exactly one valid lock name.
func oneName(cmd string, pos []string) (string, error) {
	switch len(pos) {
	case 0:
		return "", usageError("%s: no lock name given", cmd)
	case 1:
	default:
		return "", usageError("%s: want one lock name, got %d arguments", cmd, len(pos))
	}
	if err := lock.ValidateName(pos[0]); err != nil {
		return "", &failure{code: exitUsage, err: err}
	}
	return pos[0], nil
}
