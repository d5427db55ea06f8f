package cluster

import (
	"testing"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
