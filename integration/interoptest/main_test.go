// Package interoptest runs fencelock Lockers against the ZooKeeper lock
// recipes users already run — Apache Curator and Kazoo, the real
// libraries from Debian's packages, driven by package foreign — on one
// lock name of a real 3-server ensemble (issue 33): mixed fleets checked
// by package fleet, foreign holders killed and partitioned, and control
// runs that show the overlaps a layout prevents.
package interoptest

import (
	"testing"

	"github.com/fencelock/fencelock/integration/internal/foreign"
	"github.com/fencelock/fencelock/integration/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m, foreign.Cleanup) }
