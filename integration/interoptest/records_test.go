package interoptest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/internal/foreign"
	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// TestZKForeignRecords checks what a fencelock Locker with a Curator
// layout says and does about foreign clients' records: Queue lists a
// foreign holder and a foreign waiter in order, with the identity their
// znodes carry and their czxids as tokens, Holder reports the holder, and
// Revoke deletes the holder's record, which grants the waiter.
func TestZKForeignRecords(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		recipe foreign.Recipe
		layout zklock.Layout
	}{
		{foreign.CuratorMutex, zklock.LayoutCurator},
		{foreign.CuratorLatch, zklock.LayoutCuratorLatch},
		{foreign.KazooLock, zklock.LayoutCurator},
	} {
		t.Run(tc.recipe.String(), func(t *testing.T) {
			t.Parallel()
			name, path := e.dir(t)
			fs := foreign.Fleet(t, e.c, tc.recipe, path, 2, foreign.Options{})
			l := e.dial(t, tc.layout)
			ctx := ctxOf(t)
			tok, err := fs[0].Lock(ctx)
			if err != nil {
				t.Fatalf("Lock(%s) = %v", fs[0].Name(), err)
			}
			granted := lockAsync(ctx, fs[1])
			testutil.Eventually(t, 10*time.Second, "the waiter's record", func() bool { return len(e.children(t, path)) == 2 })
			want := e.queueOf(t, path)
			q, err := l.Queue(ctx, name)
			if err != nil || len(q) != 2 || !q[0].Held || q[1].Held || q[0].Holder != want[0] || q[1].Holder != want[1] {
				t.Fatalf("Queue(%q) = %+v, %v; want the holder %+v, then the waiter %+v", name, q, err, want[0], want[1])
			}
			if h, err := l.Holder(ctx, name); err != nil || h != want[0] || int64(h.Token) != tok {
				t.Errorf("Holder(%q) = %+v, %v; want %+v with token %d", name, h, err, want[0], tok)
			}
			if err := l.Revoke(ctx, name, fencing.Token(tok)); err != nil {
				t.Fatalf("Revoke(%q, %d) = %v", name, tok, err)
			}
			g := testutil.Recv(t, granted, 2*sessionTimeout, "the waiter's grant after the revocation")
			if g.err != nil || g.tok != int64(want[1].Token) {
				t.Fatalf("Lock(%s) = %d, %v; want its own record's token %d", fs[1].Name(), g.tok, g.err, want[1].Token)
			}
			// The revoked client is not told; its release finds its record gone.
			for _, f := range fs {
				if err := f.Unlock(ctx); err != nil {
					t.Errorf("Unlock(%s) = %v", f.Name(), err)
				}
			}
			e.closeAll(t, path, fs...)
		})
	}
}

// queueOf returns the records in path as exclusive holders, in sequence
// order (the text after the last non-digit): identity the znode's data,
// token its czxid.
func (e *env) queueOf(t *testing.T, path string) []lock.Holder {
	t.Helper()
	kids := e.children(t, path)
	seq := func(k string) string { return k[len(k)-10:] }
	slices.SortFunc(kids, func(a, b string) int { return strings.Compare(seq(a), seq(b)) })
	hs := make([]lock.Holder, len(kids))
	for i, k := range kids {
		data, st, err := e.admin.Get(path + "/" + k)
		if err != nil {
			t.Fatalf("Get(%s/%s) = %v", path, k, err)
		}
		hs[i] = lock.Holder{Identity: string(data), Token: fencing.Token(st.Czxid)}
	}
	return hs
}
