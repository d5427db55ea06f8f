package zktest

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/integration/internal/testutil"
	"github.com/fencelock/fencelock/zklock"
)

// TestZKTokenFromCreate checks the token a grant takes from its create's
// answer ("Tokens" in docs/design/zookeeper.md): the multi that creates a lock znode also
// stamps the lock's parent, whose new mzxid is the znode's czxid. Every
// token must equal the czxid the server reports for the lease's znode,
// whether the Locker may stamp the parent (its data version then counts
// the creates) or not (it then reads the stat, and the parent is left
// untouched).
func TestZKTokenFromCreate(t *testing.T) {
	c := startEnsemble(t)
	h := newHarness(t, c.Endpoints())
	ctx := testutil.Context(t, time.Minute)

	// checkTokens acquires name n times through l, one after the other,
	// and checks each token against the znode's czxid.
	checkTokens := func(t *testing.T, l *zklock.Locker, name string, n int) {
		t.Helper()
		var last uint64
		for i := 0; i < n; i++ {
			le, err := l.Acquire(ctx, name)
			if err != nil {
				t.Fatalf("Acquire(%q) = %v", name, err)
			}
			zl := le.(*zklock.Lease)
			h.admin.sync(t, zl.Path())
			ok, st, err := h.admin.conn.Exists(zl.Path())
			if err != nil || !ok {
				t.Fatalf("Exists(%s) = %v, %v; want the lease's znode", zl.Path(), ok, err)
			}
			if got := uint64(zl.Token()); got != uint64(st.Czxid) {
				t.Errorf("grant %d: Token() = %d; the znode's czxid is %d", i, got, st.Czxid)
			}
			if uint64(zl.Token()) <= last {
				t.Errorf("grant %d: Token() = %d after %d; want it to rise", i, zl.Token(), last)
			}
			last = uint64(zl.Token())
			if err := le.Release(ctx); err != nil {
				t.Fatalf("Release = %v", err)
			}
		}
	}
	parentStat := func(t *testing.T, name string) *zk.Stat {
		t.Helper()
		h.admin.sync(t, h.root+"/"+name)
		data, st, err := h.admin.conn.Get(h.root + "/" + name)
		if err != nil {
			t.Fatalf("Get(%s/%s) = %v", h.root, name, err)
		}
		if len(data) != 0 {
			t.Errorf("the lock's parent holds %q; want no data", data)
		}
		return st
	}

	t.Run("Stamped", func(t *testing.T) {
		const n = 4
		name := lockName(t)
		l := h.dial(t)
		checkTokens(t, l, name, n)
		if st := parentStat(t, name); st.Version != n {
			t.Errorf("the parent's data version = %d after %d grants; want %d (one stamp per create)", st.Version, n, n)
		}
	})

	t.Run("NoWritePermission", func(t *testing.T) {
		const n = 3
		name := lockName(t)
		// The parent, created with this ACL, may not be written by anyone.
		l := h.dial(t, zklock.WithACL(zk.WorldACL(zk.PermRead|zk.PermCreate|zk.PermDelete)))
		checkTokens(t, l, name, n)
		// A Locker with the default ACL, on the same parent, is refused the
		// stamp too.
		checkTokens(t, h.dial(t), name, n)
		if st := parentStat(t, name); st.Version != 0 {
			t.Errorf("the parent's data version = %d; want 0 (nobody may write it)", st.Version)
		}
	})
}
