package postgres_test

import (
	"database/sql"
	"errors"
	"os"
	"syscall"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/fencelock/fencelock/integration/postgres"
	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestStartStop starts a server, runs a query on it over TCP, stops it and
// checks that the process and its directory are gone.
func TestStartStop(t *testing.T) {
	s := postgres.Start(t)
	db, err := sql.Open("pgx", s.URL)
	if err != nil {
		t.Fatalf("sql.Open(%q) = %v", s.URL, err)
	}
	defer db.Close()
	var addr string
	if err := db.QueryRowContext(t.Context(), "SELECT host(inet_server_addr())").Scan(&addr); err != nil {
		t.Fatalf("query = %v\nlog:\n%s", err, s.Log())
	}
	if addr != "127.0.0.1" {
		t.Errorf("inet_server_addr() = %q; want 127.0.0.1", addr)
	}
	db.Close()

	pid := s.PID()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("kill(%d, 0) before Stop = %v; want the server running", pid, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop() = %v; want nil", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) after Stop = %v; want ESRCH", pid, err)
	}
	if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stat(%s) after Stop = %v; want not exist", s.Dir(), err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop() = %v; want nil", err)
	}
}
