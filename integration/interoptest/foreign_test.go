package interoptest

import (
	"testing"

	"github.com/fencelock/fencelock/integration/internal/fleet"
	"github.com/fencelock/fencelock/integration/internal/foreign"
)

// TestZKForeign checks the drivers of package foreign against themselves
// before any fencelock client joins: fleets of one library's clients
// exclude each other (the recipe, the driver and the belief window are
// sound), and the one mix of the two libraries that cannot work —
// Curator sorts Kazoo's "__lock__" znodes as text, not by sequence — is
// seen overlapping, which shows the fleet checker catches a real
// recipe's overlaps.
func TestZKForeign(t *testing.T) {
	e := newEnv(t)
	t.Run("curator-mutex", func(t *testing.T) {
		_, path := e.dir(t)
		cs := foreign.Fleet(t, e.c, foreign.CuratorMutex, path, 4, foreign.Options{})
		fleet.Check(t, run(t, fleetOf(cs), grants), grants)
		e.closeAll(t, path, cs...)
	})
	t.Run("curator-rw", func(t *testing.T) {
		_, path := e.dir(t)
		rs := foreign.Fleet(t, e.c, foreign.CuratorRead, path, 3, foreign.Options{})
		ws := foreign.Fleet(t, e.c, foreign.CuratorWrite, path, 2, foreign.Options{})
		fleet.Check(t, run(t, fleetOf(rs, fleetOf(ws)), grants), grants)
		e.closeAll(t, path, append(rs, ws...)...)
	})
	t.Run("curator-latch", func(t *testing.T) {
		_, path := e.dir(t)
		cs := foreign.Fleet(t, e.c, foreign.CuratorLatch, path, 3, foreign.Options{})
		fleet.Check(t, run(t, fleetOf(cs), 60), 60)
		e.closeAll(t, path, cs...)
	})
	t.Run("kazoo-lock", func(t *testing.T) {
		_, path := e.dir(t)
		cs := foreign.Fleet(t, e.c, foreign.KazooLock, path, 4, foreign.Options{})
		fleet.Check(t, run(t, fleetOf(cs), grants), grants)
		e.closeAll(t, path, cs...)
	})
	t.Run("curator-kazoo-control", func(t *testing.T) {
		_, path := e.dir(t)
		cs := foreign.Fleet(t, e.c, foreign.CuratorMutex, path, 4, foreign.Options{})
		ks := foreign.Fleet(t, e.c, foreign.KazooLock, path, 4, foreign.Options{})
		r := run(t, fleetOf(cs, fleetOf(ks)), grants/2)
		t.Logf("fleet: %v", r)
		if r.Overlaps == 0 || len(r.Errors) != 0 {
			t.Errorf("Curator mutexes with Kazoo locks: %d overlaps, errors %v; "+
				"want overlaps (Curator does not parse Kazoo's znodes) and no error", r.Overlaps, r.Errors)
		}
		e.closeAll(t, path, append(cs, ks...)...)
	})
}
