package sqlfence_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"

	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/sqlfence"
)

// noConnector is a database that refuses every connection: New does no
// I/O, so it is enough to build a Store.
type noConnector struct{}

func (noConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("no database in this test")
}
func (noConnector) Driver() driver.Driver { return nil }

// TestBadInput: sqlfence.New(db, d, nil) used to panic on the nil option.
func TestBadInput(t *testing.T) {
	db := sql.OpenDB(noConnector{})
	t.Cleanup(func() { db.Close() })
	s, err := sqlfence.New(db, sqlfence.Postgres)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	var nilStore *sqlfence.Store
	nilCtx := context.Context(nil)
	ctx := context.Background()
	write := func(*sql.Tx) error { return nil }
	tests := []struct {
		call string
		want error
		f    func() error
	}{
		{"New(db, Postgres, nil)", fencing.ErrInvalidConfig, func() error { _, err := sqlfence.New(db, sqlfence.Postgres, nil); return err }},
		{"New(nil db)", fencing.ErrInvalidConfig, func() error { _, err := sqlfence.New(nil, sqlfence.Postgres); return err }},
		{"New(WithMeterProvider(nil))", fencing.ErrInvalidConfig, func() error {
			_, err := sqlfence.New(db, sqlfence.Postgres, sqlfence.WithMeterProvider(nil))
			return err
		}},
		{"New(WithTracerProvider(typed nil))", fencing.ErrInvalidConfig, func() error {
			var tp *tracenoop.TracerProvider
			_, err := sqlfence.New(db, sqlfence.Postgres, sqlfence.WithTracerProvider(tp))
			return err
		}},
		{"New(dialect 0)", fencing.ErrInvalidConfig, func() error { _, err := sqlfence.New(db, 0); return err }},
		{"New(WithTable(\"\"))", fencing.ErrInvalidConfig, func() error { _, err := sqlfence.New(db, sqlfence.SQLite, sqlfence.WithTable("")); return err }},
		{"New(WithTable(\"a;b\"))", fencing.ErrInvalidConfig, func() error { _, err := sqlfence.New(db, sqlfence.SQLite, sqlfence.WithTable("a;b")); return err }},
		{"(*Store)(nil).CreateTable", fencing.ErrInvalidConfig, func() error { return nilStore.CreateTable(ctx) }},
		{"(*Store)(nil).Apply", fencing.ErrInvalidConfig, func() error { return nilStore.Apply(ctx, "r", 1, write) }},
		{"(*Store)(nil).Check", fencing.ErrInvalidConfig, func() error { return nilStore.Check(ctx, nil, "r", 1) }},
		{"(*Store)(nil).Highest", fencing.ErrInvalidConfig, func() error { _, err := nilStore.Highest(ctx, "r"); return err }},
		{"new(Store).Apply", fencing.ErrInvalidConfig, func() error { return new(sqlfence.Store).Apply(ctx, "r", 1, write) }},
		{"Store.CreateTable(nil ctx)", fencing.ErrInvalidConfig, func() error { return s.CreateTable(nilCtx) }},
		{"Store.Apply(nil ctx)", fencing.ErrInvalidConfig, func() error { return s.Apply(nilCtx, "r", 1, write) }},
		{"Store.Apply(nil fn)", fencing.ErrInvalidConfig, func() error { return s.Apply(ctx, "r", 1, nil) }},
		{"Store.Apply(zero token)", fencing.ErrInvalidToken, func() error { return s.Apply(ctx, "r", 0, write) }},
		{"Store.Apply(token above MaxInt64)", fencing.ErrInvalidToken, func() error { return s.Apply(ctx, "r", 1<<63, write) }},
		{"(*Store)(nil).ApplyAll", fencing.ErrInvalidConfig, func() error { return nilStore.ApplyAll(ctx, map[string]fencing.Token{"r": 1}, write) }},
		{"Store.ApplyAll(nil map)", fencing.ErrInvalidConfig, func() error { return s.ApplyAll(ctx, nil, write) }},
		{"Store.ApplyAll(empty map)", fencing.ErrInvalidConfig, func() error { return s.ApplyAll(ctx, map[string]fencing.Token{}, write) }},
		{"Store.ApplyAll(nil ctx)", fencing.ErrInvalidConfig, func() error { return s.ApplyAll(nilCtx, map[string]fencing.Token{"a": 1, "b": 2}, write) }},
		{"Store.ApplyAll(nil fn)", fencing.ErrInvalidConfig, func() error { return s.ApplyAll(ctx, map[string]fencing.Token{"a": 1, "b": 2}, nil) }},
		{"Store.ApplyAll(one zero token)", fencing.ErrInvalidToken, func() error { return s.ApplyAll(ctx, map[string]fencing.Token{"a": 1, "b": 0}, write) }},
		{"Store.ApplyAll(one token above MaxInt64)", fencing.ErrInvalidToken, func() error { return s.ApplyAll(ctx, map[string]fencing.Token{"a": 1 << 63, "b": 2}, write) }},
		{"Store.Check(nil ctx)", fencing.ErrInvalidConfig, func() error { return s.Check(nilCtx, nil, "r", 1) }},
		{"Store.Check(nil tx)", fencing.ErrInvalidConfig, func() error { return s.Check(ctx, nil, "r", 1) }},
		{"Store.Highest(nil ctx)", fencing.ErrInvalidConfig, func() error { _, err := s.Highest(nilCtx, "r"); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s panicked: %v", tt.call, r)
					}
				}()
				err = tt.f()
			}()
			if !errors.Is(err, tt.want) {
				t.Errorf("%s = %v; want an error wrapping %v", tt.call, err, tt.want)
			}
		})
	}
	if got := nilStore.Table(); got != "" {
		t.Errorf("(*Store)(nil).Table() = %q; want \"\"", got)
	}
}
