package cluster

import "testing"

// TestHeldLogBytes checks the accounting that benchtest subtracts from its
// heap figures: a member's buffer counts with its capacity until its
// member is torn down, and then not at all. (No test of this package runs
// in parallel, and every cluster of an earlier test is torn down, so the
// total moves only with this test's buffer.)
func TestHeldLogBytes(t *testing.T) {
	before := HeldLogBytes()
	b := newLogBuffer()
	if _, err := b.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if got := HeldLogBytes() - before; got < 1000 {
		t.Errorf("HeldLogBytes() grew by %d after a 1000-byte write; want at least 1000", got)
	}
	b.release()
	if got := HeldLogBytes(); got != before {
		t.Errorf("HeldLogBytes() = %d after release; want %d, as before the buffer", got, before)
	}
	if b.String() == "" {
		t.Error("the output of a released buffer is gone; want it kept for the logs of a failed test")
	}
}
