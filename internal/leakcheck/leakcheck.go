// Package leakcheck fails a test binary that leaves goroutines behind.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// ignored are goroutines that belong to the runtime, the testing package or
// libraries that keep process-wide workers by design.
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
	"go.opencensus.io/stats/view.(*worker).start",
	"github.com/golang/glog.",
	"go.uber.org/zap/zapcore.(*bufferWriter)",
}

// Main runs the tests and then, if they passed, waits up to five seconds for
// every goroutine they started to end. Goroutines still running are printed
// and the binary exits with status 1.
func Main(m *testing.M, extraIgnored ...string) {
	code := m.Run()
	if code == 0 {
		if leaked := Wait(5*time.Second, extraIgnored...); leaked != "" {
			fmt.Fprintf(os.Stderr, "leakcheck: goroutines still running after the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// Wait returns "" once no unexpected goroutine is left, or the stacks of the
// ones still running when timeout expires.
func Wait(timeout time.Duration, extraIgnored ...string) string {
	deadline := time.Now().Add(timeout)
	for {
		leaked := Leaked(extraIgnored...)
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Leaked returns the stacks of the goroutines other than the caller's and
// those matching the ignore lists.
func Leaked(extraIgnored ...string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	stacks := strings.Split(string(buf), "\n\n")
	for i, s := range stacks {
		if i == 0 { // the calling goroutine
			continue
		}
		if !isIgnored(s, extraIgnored) {
			out = append(out, s)
		}
	}
	return out
}

func isIgnored(stack string, extra []string) bool {
	// The first frame line names the function the goroutine is parked in;
	// the "created by" line names its creator. Match both against the lists.
	lines := strings.Split(stack, "\n")
	var top, creator string
	if len(lines) > 1 {
		top = lines[1]
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "created by ") {
			creator = l
		}
	}
	for _, lists := range [][]string{ignored, extra} {
		for _, p := range lists {
			if strings.Contains(top, p) || strings.Contains(creator, p) || (strings.HasPrefix(p, "testing.") && strings.Contains(stack, p)) {
				return true
			}
		}
	}
	return false
}
