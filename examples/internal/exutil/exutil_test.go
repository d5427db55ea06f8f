package exutil

import (
	"testing"

	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestQ(t *testing.T) {
	tests := []struct {
		dialect sqlfence.Dialect
		in      string
		want    string
	}{
		{sqlfence.SQLite, "SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = ? AND c = ?"},
		{sqlfence.Postgres, "SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = $1 AND c = $2"},
		{sqlfence.Postgres, "SELECT 1", "SELECT 1"},
	}
	for _, tt := range tests {
		db := &DB{Dialect: tt.dialect}
		if got := db.Q(tt.in); got != tt.want {
			t.Errorf("Q(%v, %q) = %q; want %q", tt.dialect, tt.in, got, tt.want)
		}
	}
}

func TestWithIdentity(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"etcd://127.0.0.1:2379/app", "etcd://127.0.0.1:2379/app?identity=node-1"},
		{"zk://127.0.0.1:2181/app?session_timeout=5s", "zk://127.0.0.1:2181/app?identity=node-1&session_timeout=5s"},
		{"etcd://127.0.0.1:2379/app?identity=other", "etcd://127.0.0.1:2379/app?identity=other"},
	}
	for _, tt := range tests {
		got, err := WithIdentity(tt.in, "node-1")
		if err != nil || got != tt.want {
			t.Errorf("WithIdentity(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestOpenDBRejectsUnknown(t *testing.T) {
	for _, dsn := range []string{"mysql://x", "sqlite:", "cron.db"} {
		if db, err := OpenDB(dsn); err == nil {
			db.Close()
			t.Errorf("OpenDB(%q) = nil error; want an error", dsn)
		}
	}
}
