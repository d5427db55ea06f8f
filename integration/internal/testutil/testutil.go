// Package testutil holds the small helpers the integration test packages
// share: a goroutine-safe output buffer, unique lock names, polling with a
// deadline, contexts bounded by the test, child processes with their output
// captured, and plain etcd and ZooKeeper clients for inspecting a cluster
// behind the Lockers' backs.
//
// Every helper that can fail takes a [testing.TB], calls t.Helper and fails
// the test itself; whatever it starts it stops in t.Cleanup. The helpers
// make no assertion of their own about the code under test.
package testutil

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer that is safe for concurrent use: a child
// process's output can be written to it while a test reads it. The zero
// value is an empty buffer ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer. It never fails.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// WriteString appends s to the buffer.
func (b *SyncBuffer) WriteString(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.WriteString(s)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

var (
	nameSeq atomic.Int64
	// notNameByte matches what lock.ValidateName refuses inside a segment.
	notNameByte = regexp.MustCompile(`[^A-Za-z0-9._:-]`)
)

// UniqueName returns a name no other test of the binary uses, and that is
// unlikely to clash with one left on a cluster by an earlier run: t.Name()
// with every byte a lock name segment cannot hold replaced by '_', then
// "-", the current time in nanoseconds modulo 1e9, "-" and a sequence
// number. It is a single segment (it holds no '/'), so it is also a valid
// etcd key part and ZooKeeper node name; with t.Name() at most about 230
// bytes long it is a valid lock name.
func UniqueName(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("%s-%d-%d", notNameByte.ReplaceAllString(t.Name(), "_"), time.Now().UnixNano()%1e9, nameSeq.Add(1))
}

// pollInterval is how often Eventually checks its condition.
const pollInterval = 10 * time.Millisecond

// Eventually polls cond every 10ms until it returns true, and fails the
// test with what in the message if it is still false after timeout. It
// must be called from the test's goroutine.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(pollInterval) // polling with a deadline, not ordering
	}
}

// Context returns a context that is cancelled after d or when the test
// ends, whichever comes first.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Recv waits for one value from ch and returns it, failing the test with
// what in the message if none comes within timeout. A closed channel
// yields its zero value at once. It must be called from the test's
// goroutine.
func Recv[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s: nothing within %v", what, timeout)
		var zero T
		return zero
	}
}

// FreeAddr returns a loopback address with a port nobody listened on a
// moment ago, for a server a test starts in another process.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
