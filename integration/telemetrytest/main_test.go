// Package telemetrytest checks package internal/telemetry against the
// OpenTelemetry SDK, without a cluster: what each instrument exports for a
// fixed sequence of calls, and what one lease's recordings cost.
package telemetrytest

import (
	"testing"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m)
}
