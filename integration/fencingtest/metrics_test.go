package fencingtest

import (
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/httpfence"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// checkDecisions fails the test unless helper counted accepted and
// rejected decisions.
func checkDecisions(t *testing.T, m *testutil.Metrics, helper string, accepted, rejected int64) {
	t.Helper()
	for decision, want := range map[string]int64{"accepted": accepted, "rejected": rejected} {
		attrs := map[string]string{"fencelock.helper": helper, "fencelock.decision": decision}
		if got := m.Sum(t, "fencelock.fencing.decisions", attrs); got != want {
			t.Errorf("fencelock.fencing.decisions{helper=%s, decision=%s} = %d; want %d\n%s", helper, decision, got, want, m.Dump(t))
		}
	}
}

// TestGuardMetrics checks that a Guard counts the writes it accepts and
// the stale ones it refuses.
func TestGuardMetrics(t *testing.T) {
	m := testutil.NewMetrics(t)
	g, err := fencing.NewGuard(16, fencing.WithMeterProvider(m.Provider))
	if err != nil {
		t.Fatalf("NewGuard() = %v", err)
	}
	for _, tok := range []fencing.Token{5, 7, 7} {
		if err := g.Apply("r", tok, func() error { return nil }); err != nil {
			t.Fatalf("Apply(%d) = %v", tok, err)
		}
	}
	if err := g.Apply("r", 6, func() error { return nil }); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("Apply(6) after 7 = %v; want an error wrapping %v", err, fencing.ErrStaleToken)
	}
	checkDecisions(t, m, "guard", 3, 1)
}

// TestHTTPFenceMetrics checks that the middleware, behind a real HTTP
// server, counts the requests it lets through and the stale ones it
// refuses, with a span per request.
func TestHTTPFenceMetrics(t *testing.T) {
	m := testutil.NewMetrics(t)
	tp, spans := testutil.Spans(t)
	var g fencing.Guard
	h, err := httpfence.Handler(&g, func(r *http.Request) string { return r.URL.Path },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		httpfence.WithMeterProvider(m.Provider), httpfence.WithTracerProvider(tp))
	if err != nil {
		t.Fatalf("Handler() = %v", err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, c := range []struct {
		token string
		code  int
	}{{"8", http.StatusOK}, {"9", http.StatusOK}, {"8", http.StatusConflict}} {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/item", nil)
		req.Header.Set(httpfence.Header, c.token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("PUT with token %s: %v", c.token, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Fatalf("PUT with token %s: status %d; want %d", c.token, resp.StatusCode, c.code)
		}
	}
	checkDecisions(t, m, "httpfence", 2, 1)
	var n int
	for _, s := range spans.Ended() {
		if s.Name() == "fencelock.fenced_write" {
			n++
		}
	}
	if n != 3 {
		t.Errorf("fenced_write spans = %d; want 3", n)
	}
}

// TestSQLFenceMetrics checks that a Store counts, on each database, the
// writes Apply and Check accept and the stale ones they refuse.
func TestSQLFenceMetrics(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		m := testutil.NewMetrics(t)
		db := b.open(t)
		table := tableName(t, "fence_")
		freshStore(t, db, b.dialect, table)
		store, err := sqlfence.New(db, b.dialect, sqlfence.WithTable(table), sqlfence.WithMeterProvider(m.Provider))
		if err != nil {
			t.Fatalf("sqlfence.New() = %v", err)
		}
		ctx := t.Context()
		noop := func(*sql.Tx) error { return nil }
		for _, tok := range []fencing.Token{3, 4} {
			if err := store.Apply(ctx, "row", tok, noop); err != nil {
				t.Fatalf("Apply(%d) = %v", tok, err)
			}
		}
		if err := store.Apply(ctx, "row", 3, noop); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("Apply(3) after 4 = %v; want an error wrapping %v", err, fencing.ErrStaleToken)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("BeginTx() = %v", err)
		}
		if err := store.Check(ctx, tx, "row", 2); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("Check(2) after 4 = %v; want an error wrapping %v", err, fencing.ErrStaleToken)
		}
		_ = tx.Rollback()
		checkDecisions(t, m, "sqlfence", 2, 2)
	})
}
