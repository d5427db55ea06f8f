package cluster

import (
	"bytes"
	"strings"
	"sync"
)

// maxLogBytes bounds the output kept per member; older output is dropped.
const maxLogBytes = 8 << 20

// logBuffer collects a server's output. It is safe for concurrent use.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	dropped int64
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - maxLogBytes; over > 0 {
		b.buf.Next(over)
		b.dropped += int64(over)
	}
	return len(p), nil
}

// live is every logBuffer of a member not torn down yet, for HeldLogBytes.
var live = struct {
	mu   sync.Mutex
	bufs map[*logBuffer]struct{}
}{bufs: map[*logBuffer]struct{}{}}

// newLogBuffer returns an empty logBuffer that HeldLogBytes counts until
// release.
func newLogBuffer() *logBuffer {
	b := new(logBuffer)
	live.mu.Lock()
	live.bufs[b] = struct{}{}
	live.mu.Unlock()
	return b
}

// release stops counting b in HeldLogBytes; its output stays readable.
func (b *logBuffer) release() {
	live.mu.Lock()
	delete(live.bufs, b)
	live.mu.Unlock()
}

// HeldLogBytes returns how much of this process's heap holds the output of
// the servers the process provider started and has not torn down: the
// capacity of their buffers (up to 8 MiB per member, growing by doubling
// as the servers log). A measurement of this process's live heap
// subtracts it (benchtest's heap per held lease): otherwise a buffer that
// grows while the measured objects are being made would count as theirs,
// by more the busier the servers' logs. Members in containers keep their
// output in the container engine: 0 for them.
func HeldLogBytes() int64 {
	live.mu.Lock()
	defer live.mu.Unlock()
	var n int64
	for b := range live.bufs {
		b.mu.Lock()
		n += int64(b.buf.Cap())
		b.mu.Unlock()
	}
	return n
}

// String returns everything kept so far.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail returns the last n lines.
func (b *logBuffer) tail(n int) string { return lastLines(b.String(), n) }

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	if n <= 0 {
		return ""
	}
	s = strings.TrimRight(s, "\n")
	i := len(s)
	for ; n > 0; n-- {
		j := strings.LastIndexByte(s[:i], '\n')
		if j < 0 {
			return s
		}
		i = j
	}
	return s[i+1:]
}
