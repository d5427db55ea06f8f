package benchtest

import (
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

// TestMain runs the tests, or, when started as the lock holder of the
// failover measurement, only holds the lock.
func TestMain(m *testing.M) {
	if spec := os.Getenv(holderEnv); spec != "" {
		os.Exit(runHolder(spec))
	}
	leakcheck.Main(m)
}
