package zktest

import (
	"testing"

	"github.com/fencelock/fencelock/lock/locktest"
)

// TestZKConformance runs the conformance suite against zklock on a real
// ensemble, with server-side session expiry and record listing.
func TestZKConformance(t *testing.T) {
	c := startEnsemble(t)
	locktest.TestLocker(t, newHarness(t, c.Endpoints()))
}
