package cluster

import (
	"errors"
	"fmt"
	"testing"
)

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

// TestIsEngineHiccup checks which container start errors are retried as
// a failed request to the Docker engine: the client's connection errors
// only, not a container's own failure or a port in use.
func TestIsEngineHiccup(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{errors.New(`start etcd-3: container start: error during connect: Post "http://%2Fvar%2Frun%2Fdocker.sock/v1.41/containers/x/start": net/http: HTTP/1.x transport connection broken: http: CloseIdleConnections called`), true},
		{fmt.Errorf("etcd-1: %w: exited", errPortInUse), false},
		{errors.New("start zk-2: container exited with code 3"), false},
		{nil, false},
	} {
		if got := isEngineHiccup(tt.err); got != tt.want {
			t.Errorf("isEngineHiccup(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
}
