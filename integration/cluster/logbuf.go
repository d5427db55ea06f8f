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
