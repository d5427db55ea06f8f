// Package leakcheck fails a test binary that leaves goroutines behind:
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// ignored are the goroutines of the runtime, of testing and of libraries
// that keep process-wide workers.
var ignored = []string{
	"testing.Main(",
	"testing.tRunner(",
	"testing.(*M).",
	"testing.runFuzzing(",
	"testing.(*F).",
	"runtime.goexit",
	"created by runtime.gc",
	"created by os/signal.Notify",
	"os/signal.signal_recv",
	"runtime.ensureSigM",
	"runtime/trace.Start",
	"google.golang.org/grpc/internal/grpcsync.NewCallbackSerializer",
	"google.golang.org/grpc/internal/transport.(*controlBuffer)",
	"go.uber.org/zap/zapcore.(*bufferWriter)",
}

// Main runs the tests and then, if they passed, waits up to five seconds for
// every goroutine they started to end. Goroutines still running are printed
// and the binary exits with status 1.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := Wait(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leakcheck: goroutines still running after the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// Wait returns "" once no unexpected goroutine is left, or the stacks of the
// ones still running when timeout expires.
func Wait(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		leaked := leaked()
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaked returns the stacks of the goroutines other than the caller's that
// are not ignored.
func leaked() []string {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	for n == len(buf) {
		buf = make([]byte, 2*len(buf))
		n = runtime.Stack(buf, true)
	}
	stacks := strings.Split(string(buf[:n]), "\n\n")[1:] // the first is the caller's
	return slices.DeleteFunc(stacks, isIgnored)
}

// isIgnored matches the function a goroutine is parked in (its first frame)
// and its "created by" line against ignored; testing's entries match
// anywhere in the stack.
func isIgnored(stack string) bool {
	_, frames, _ := strings.Cut(stack, "\n") // after "goroutine N [state]:"
	top, _, _ := strings.Cut(frames, "\n")
	var creator string
	if i := strings.Index(stack, "\ncreated by "); i >= 0 {
		creator, _, _ = strings.Cut(stack[i+1:], "\n")
	}
	return slices.ContainsFunc(ignored, func(p string) bool {
		return strings.Contains(top, p) || strings.Contains(creator, p) || strings.HasPrefix(p, "testing.") && strings.Contains(stack, p)
	})
}
