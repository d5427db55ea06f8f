package lock_test

import (
	"testing"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
