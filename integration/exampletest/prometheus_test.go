package exampletest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/integration/internal/testutil"
)

var (
	metricsServing = regexp.MustCompile(`^serving metrics on http://(\S+)/metrics$`)
	metricsLost    = regexp.MustCompile(`^worker (\d+): lost its lease \(token (\d+)\): `)
	metricsRefused = regexp.MustCompile(`^worker (\d+): stale write refused: `)
)

// The series the dashboard's lost-lease and rejection panels draw, as
// Prometheus stores what the example's exporter serves.
const (
	lostQuery     = `sum(fencelock_leases_lost_total)`
	rejectedQuery = `sum(fencelock_fencing_decisions_total{fencelock_decision="rejected"})`
	waitQuery     = `histogram_quantile(0.99, sum by (le) (rate(fencelock_acquire_duration_seconds_bucket[1m])))`
)

// prometheusBin returns the Prometheus server to run: $FENCELOCK_PROMETHEUS_BIN,
// or Debian's. Without one the test skips, or fails under CI=true.
func prometheusBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("FENCELOCK_PROMETHEUS_BIN")
	if bin == "" {
		bin = "/usr/bin/prometheus"
	}
	if _, err := os.Stat(bin); err != nil {
		if errors.Is(err, fs.ErrNotExist) && !cluster.InCI() {
			t.Skipf("no Prometheus server at %s (apt-get install prometheus, or make deps; under CI=true this fails)", bin)
		}
		t.Fatalf("Prometheus server: %v", err)
	}
	return bin
}

// startPrometheus runs a Prometheus server on loopback that scrapes target
// every second, and returns its address once it is ready.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin := prometheusBin(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: fencelock-example
    static_configs:
      - targets: ['%s']
`, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreeAddr(t)
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--web.console.templates="+dir, "--web.console.libraries="+dir)
	testutil.StartProc(t, cmd, testutil.ProcConfig{DropLines: true})
	testutil.Eventually(t, 30*time.Second, "Prometheus ready", func() bool {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return addr
}

// query runs an instant query and returns the value of its single sample
// (false when the result is empty).
func query(t *testing.T, prom, q string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + prom + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		t.Fatalf("query %s: %v, %s", q, err, body)
	}
	if len(r.Data.Result) != 1 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("query %s: value %q", q, s)
	}
	return v, true
}

// testMetrics runs the metrics example with a real Prometheus server
// scraping it: the run's faults (a stuck worker whose grant is revoked,
// then its stale write) must reach Prometheus as the lost-lease and
// rejection series the dashboard draws. With FENCELOCK_SCREENSHOT set,
// the run goes on for a minute and Chromium saves Prometheus' graph page
// of those series there.
func testMetrics(t *testing.T, b backend) {
	target := testutil.FreeAddr(t)
	prom := startPrometheus(t, target)
	p := start(t, "metrics", "--url", b.url, "--metrics-addr", target, "--lock", "examples/"+testutil.UniqueName(t),
		"--stuck-every", "4", "--hold", "20ms")
	if m := p.expect(30*time.Second, metricsServing); m[1] != target {
		t.Fatalf("example serves metrics on %s; want %s", m[1], target)
	}
	p.expect(60*time.Second, metricsLost)
	p.expect(60*time.Second, metricsRefused)

	started := time.Now()
	testutil.Eventually(t, 60*time.Second, "Prometheus has the lost-lease and rejection series", func() bool {
		lost, ok1 := query(t, prom, lostQuery)
		rejected, ok2 := query(t, prom, rejectedQuery)
		return ok1 && ok2 && lost >= 1 && rejected >= 1
	})
	if v, ok := query(t, prom, `sum(fencelock_leases_lost_total{fencelock_reason="deleted"})`); !ok || v < 1 {
		t.Errorf("lost leases with reason deleted (revoked by the operator) = %v (%v); want at least 1", v, ok)
	}
	if v, ok := query(t, prom, `sum(fencelock_fencing_decisions_total{fencelock_helper="guard",fencelock_decision="accepted"})`); !ok || v < 1 {
		t.Errorf("accepted guard writes = %v (%v); want at least 1", v, ok)
	}

	checkDashboard(t, prom)

	shot := os.Getenv("FENCELOCK_SCREENSHOT")
	if shot == "" {
		return
	}
	// Enough points for the graphs to show a run, not a dot.
	if d := 90*time.Second - time.Since(started); d > 0 {
		time.Sleep(d) // the run being recorded, not an ordering of steps
	}
	screenshot(t, prom, shot)
}

// screenshot saves Prometheus' graph page of the dashboard's series to
// path with headless Chromium.
func screenshot(t *testing.T, prom, path string) {
	t.Helper()
	bin := os.Getenv("FENCELOCK_CHROMIUM_BIN")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	q := url.Values{}
	for i, expr := range []string{
		`sum by (fencelock_reason) (fencelock_leases_lost_total)`,
		`sum by (fencelock_helper, fencelock_decision) (fencelock_fencing_decisions_total)`,
		waitQuery,
	} {
		g := "g" + strconv.Itoa(i)
		q.Set(g+".expr", expr)
		q.Set(g+".tab", "0")
		q.Set(g+".range_input", "2m")
	}
	page := "http://" + prom + "/graph?" + q.Encode()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir="+t.TempDir(), "--window-size=1400,2350", "--virtual-time-budget=15000",
		"--screenshot="+abs, page)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	if st, err := os.Stat(abs); err != nil || st.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (size %v); want a picture", abs, err, st)
	}
	t.Logf("screenshot of %s saved to %s", page, abs)
}

// checkDashboard runs every query of the Grafana dashboard next to the
// example against the Prometheus server, with Grafana's variables
// replaced: each must be valid, and the panels of lost leases and
// rejections must have data.
func checkDashboard(t *testing.T, prom string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "metrics", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	vars := strings.NewReplacer("$backend", ".*", "$__rate_interval", "1m")
	// Rates and increases need two scrapes of a series: the panels
	// fill within a few scrape intervals.
	var errs []string
	withData := map[string]bool{}
	want := []string{"Wait time (acquire, granted)", "Hold time", "Lost leases, by reason", "Fencing rejections, by helper"}
	deadline := time.Now().Add(30 * time.Second)
	for {
		errs, withData = nil, map[string]bool{}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				n, err := queryCount(prom, vars.Replace(tg.Expr))
				if err != nil {
					errs = append(errs, fmt.Sprintf("panel %q: query %s: %v", p.Title, tg.Expr, err))
				}
				if n > 0 {
					withData[p.Title] = true
				}
			}
		}
		full := true
		for _, title := range want {
			full = full && withData[title]
		}
		if full || len(errs) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second) // the next scrape
	}
	for _, e := range errs {
		t.Errorf("dashboard %s", e)
	}
	for _, title := range want {
		if !withData[title] {
			t.Errorf("dashboard panel %q has no data after a run with faults", title)
		}
	}
}

// queryCount runs an instant query and returns the number of series in
// its result, or Prometheus' error.
func queryCount(prom, q string) (int, error) {
	resp, err := http.Get("http://" + prom + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Error  string
		Data   struct{ Result []json.RawMessage }
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s", r.Error)
	}
	return len(r.Data.Result), nil
}
