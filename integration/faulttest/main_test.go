package faulttest

import (
	"flag"
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

// chaosFlag turns TestChaos on, as FENCELOCK_CHAOS=1 does.
var chaosFlag = flag.Bool("chaos", false, "run TestChaos (also FENCELOCK_CHAOS=1)")

func TestMain(m *testing.M) {
	// A client process (see startClient) runs the workload instead of the
	// tests; it checks for leaked goroutines itself, so that its exit
	// status says whether it ended cleanly.
	if os.Getenv(clientEnv) != "" {
		flag.Parse()
		os.Exit(clientMain())
	}
	leakcheck.Main(m)
}
