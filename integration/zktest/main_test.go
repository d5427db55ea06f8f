// Package zktest runs package zklock against real 3-server ZooKeeper
// ensembles: the conformance suite of package locktest, fault tests
// (killed leader, partitions, expired sessions, dropped connections) and
// benchmarks against go-zookeeper's own lock recipe.
package zktest

import (
	"testing"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
