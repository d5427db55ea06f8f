package zklock

import (
	"fmt"
	"log/slog"

	"github.com/fencelock/fencelock/internal/secure"
)

// zkLogger sends go-zookeeper's log lines to slog at debug level. It
// never logs credentials, but its lines go through Redact all the same.
type zkLogger struct {
	l       *slog.Logger
	secrets []string
}

func (z zkLogger) Printf(format string, args ...any) {
	z.l.Debug("zk: " + secure.Redact(fmt.Sprintf(format, args...), z.secrets...))
}
