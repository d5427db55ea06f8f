package interoptest

import (
	"testing"

	"github.com/fencelock/fencelock/integration/internal/fleet"
	"github.com/fencelock/fencelock/integration/internal/foreign"
	"github.com/fencelock/fencelock/zklock"
)

// TestZKMixed runs mixed fleets on one lock name: fencelock Lockers with a
// Curator layout and the real recipe that layout names, at least four of
// each, for at least 500 grants. No two clients may believe they hold at
// once (a reader may share with readers), tokens rise in grant order,
// every client is served, and nothing is left in the lock's directory
// once everyone closed. The control runs the default layout against
// Curator and must overlap: the layout is what makes them exclude.
func TestZKMixed(t *testing.T) {
	e := newEnv(t)
	t.Run("curator-mutex", func(t *testing.T) {
		name, path := e.dir(t)
		ls := e.lockers(t, zklock.LayoutCurator, name, 4, false)
		fs := foreign.Fleet(t, e.c, foreign.CuratorMutex, path, 4, foreign.Options{})
		fleet.Check(t, run(t, fleetOf(ls, fleetOf(fs)), grants), grants)
		closeLockers(t, ls...)
		e.closeAll(t, path, fs...)
	})
	t.Run("curator-rw", func(t *testing.T) {
		name, path := e.dir(t)
		lr := e.lockers(t, zklock.LayoutCuratorReadWrite, name, 2, true)
		lw := e.lockers(t, zklock.LayoutCuratorReadWrite, name, 2, false)
		fr := foreign.Fleet(t, e.c, foreign.CuratorRead, path, 2, foreign.Options{})
		fw := foreign.Fleet(t, e.c, foreign.CuratorWrite, path, 2, foreign.Options{})
		fleet.Check(t, run(t, fleetOf(lr, fleetOf(lw), fleetOf(fr), fleetOf(fw)), grants), grants)
		closeLockers(t, append(lr, lw...)...)
		e.closeAll(t, path, append(fr, fw...)...)
	})
	t.Run("curator-latch", func(t *testing.T) {
		name, path := e.dir(t)
		ls := e.lockers(t, zklock.LayoutCuratorLatch, name, 2, false)
		cands := []*candidate{
			newCandidate(t, e.dial(t, zklock.LayoutCuratorLatch), "fencelock-election-0", name),
			newCandidate(t, e.dial(t, zklock.LayoutCuratorLatch), "fencelock-election-1", name),
		}
		fs := foreign.Fleet(t, e.c, foreign.CuratorLatch, path, 4, foreign.Options{})
		fleet.Check(t, run(t, fleetOf(ls, fleetOf(cands), fleetOf(fs)), grants), grants)
		closeLockers(t, ls...)
		e.closeAll(t, path, fs...)
	})
	t.Run("kazoo", func(t *testing.T) {
		name, path := e.dir(t)
		ls := e.lockers(t, zklock.LayoutCurator, name, 4, false)
		fs := foreign.Fleet(t, e.c, foreign.KazooLock, path, 4, foreign.Options{})
		fleet.Check(t, run(t, fleetOf(ls, fleetOf(fs)), grants), grants)
		closeLockers(t, ls...)
		e.closeAll(t, path, fs...)
	})
	t.Run("control-default-layout", func(t *testing.T) {
		name, path := e.dir(t)
		ls := e.lockers(t, zklock.LayoutFencelock, name, 4, false)
		fs := foreign.Fleet(t, e.c, foreign.CuratorMutex, path, 4, foreign.Options{})
		r := run(t, fleetOf(ls, fleetOf(fs)), grants/2)
		t.Logf("fleet: %v", r)
		if r.Overlaps == 0 || len(r.Errors) != 0 {
			t.Errorf("default layout with Curator: %d overlaps, errors %v; "+
				"want overlaps (neither sees the other's records) and no error", r.Overlaps, r.Errors)
		}
		closeLockers(t, ls...)
		e.closeAll(t, path, fs...)
	})
}
