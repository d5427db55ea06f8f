package fencing_test

import (
	"testing"

	"github.com/fencelock/fencelock/fencing"
)

// TestGuardApplyNoAllocsWithoutMetrics checks that Guard.Apply's accepted
// path allocates nothing when no meter provider was given, for the zero
// Guard and for one from NewGuard, once the resource is known.
func TestGuardApplyNoAllocsWithoutMetrics(t *testing.T) {
	made, err := fencing.NewGuard(16)
	if err != nil {
		t.Fatal(err)
	}
	ok := func() error { return nil }
	for name, g := range map[string]*fencing.Guard{"zero Guard": new(fencing.Guard), "NewGuard": made} {
		tok := fencing.Token(1)
		if err := g.Apply("r", tok, ok); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			tok++
			if err := g.Apply("r", tok, ok); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: Apply() accepted path allocates %v times per call; want 0", name, allocs)
		}
	}
}
