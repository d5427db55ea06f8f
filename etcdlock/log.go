package etcdlock

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fencelock/fencelock/internal/secure"
)

// clientLogger returns a zap logger that sends the lines of a client from
// lock.Open to the Locker's logger, without secrets (see WithLogger).
func clientLogger(l *slog.Logger, secrets ...string) *zap.Logger {
	return zap.New(&zapSlog{h: l.Handler(), secrets: secrets})
}

// zapSlog is a zapcore.Core that writes to a slog.Handler.
type zapSlog struct {
	h       slog.Handler
	secrets []string
	fields  []zapcore.Field
}

func (z *zapSlog) level(l zapcore.Level) slog.Level {
	if l >= zapcore.ErrorLevel {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// Enabled leaves out the client's debug lines, several per request.
func (z *zapSlog) Enabled(l zapcore.Level) bool {
	return l >= zapcore.InfoLevel && z.h.Enabled(context.Background(), z.level(l))
}

func (z *zapSlog) With(fields []zapcore.Field) zapcore.Core {
	return &zapSlog{h: z.h, secrets: z.secrets, fields: append(slices.Clip(z.fields), fields...)}
}

func (z *zapSlog) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if z.Enabled(e.Level) {
		return ce.AddCore(e, z)
	}
	return ce
}

func (z *zapSlog) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range slices.Concat(z.fields, fields) {
		f.AddTo(enc)
	}
	r := slog.NewRecord(e.Time, z.level(e.Level), "etcd client: "+secure.Redact(e.Message, z.secrets...), 0)
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		v := enc.Fields[k]
		if s, ok := v.(string); ok {
			v = secure.Redact(s, z.secrets...)
		}
		r.AddAttrs(slog.Any(k, v))
	}
	return z.h.Handle(context.Background(), r)
}

func (z *zapSlog) Sync() error { return nil }
