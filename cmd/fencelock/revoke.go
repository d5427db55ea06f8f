package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/lock"
)

// revoke implements "fencelock revoke NAME --token T".
func (a *app) revoke(ctx context.Context, c *common, args []string) error {
	fset := newFlagSet("revoke")
	c.register(fset)
	token := fset.Uint64("token", 0, "the token of the grant to end")
	pos, err := parseInterspersed(fset, args)
	if err != nil {
		return a.flagError("revoke", err)
	}
	name, err := oneName("revoke", pos)
	if err != nil {
		return err
	}
	if *token == 0 {
		return usageError("revoke: --token T is required (a holder's token, as holder prints it)")
	}
	ictx, stop := a.interruptible(ctx)
	defer stop()
	l, err := a.open(ictx, c)
	if err != nil {
		return err
	}
	defer l.Close()
	rv, ok := l.(lock.Revoker)
	if !ok {
		return fmt.Errorf("revoke: this backend cannot revoke a grant")
	}
	rctx, cancel := context.WithTimeout(ictx, c.timeout)
	defer cancel()
	err = rv.Revoke(rctx, name, fencing.Token(*token))
	switch {
	case errors.Is(err, lock.ErrNotHeld):
		return fail(exitFree, "lock %q has no holder with token %d", name, *token)
	case err != nil:
		if s := stop(); s != nil {
			return fail(signalStatus(s), "interrupted by %v", s)
		}
		return fmt.Errorf("revoke: %w", err)
	}
	fmt.Fprintf(a.stdout, "revoked token=%d\n", *token)
	return nil
}
