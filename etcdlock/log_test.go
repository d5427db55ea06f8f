package etcdlock

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestClientLogger checks the route of the etcd client's own log lines:
// into the Locker's logger, one level lower for warnings, with their
// fields and without the password.
func TestClientLogger(t *testing.T) {
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	z := clientLogger(slog.New(h), "s3cret").With(zap.String("endpoint", "127.0.0.1:1"))
	z.Warn("retrying of unary invoker failed", zap.Int("attempt", 2), zap.String("auth", "user:s3cret"))
	z.Error("lease keepalive failed s3cret")
	z.Debug("picked a member") // the client's own debug lines are left out

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("got %d log lines; want 2:\n%s", len(lines), buf.String())
	}
	if got := lines[0]; got["level"] != "DEBUG" || got["msg"] != "etcd client: retrying of unary invoker failed" ||
		got["endpoint"] != "127.0.0.1:1" || got["attempt"] != float64(2) || got["auth"] != "user:<redacted>" {
		t.Errorf("client warning logged as %v; want level DEBUG, the message prefixed, its fields, no password", got)
	}
	if got := lines[1]; got["level"] != "WARN" || got["msg"] != "etcd client: lease keepalive failed <redacted>" {
		t.Errorf("client error logged as %v; want level WARN, no password", got)
	}
	if strings.Contains(buf.String(), "s3cret") {
		t.Errorf("log output contains the password:\n%s", buf.String())
	}

	// Below the handler's level, nothing is formatted or written.
	buf.Reset()
	quiet := clientLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	quiet.Warn("not shown")
	if ce := quiet.Check(zap.WarnLevel, "x"); ce != nil {
		t.Errorf("Check(warn) at info level = %v; want nil", ce)
	}
	if buf.Len() != 0 {
		t.Errorf("warning below the handler's level wrote %q; want nothing", buf.String())
	}
}
