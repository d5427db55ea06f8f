package clitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// scrape reads http://addr/metrics and parses it with Prometheus' own
// text parser.
func scrape(addr string) (map[string]*dto.MetricFamily, string, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, string(body), fmt.Errorf("status %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		return nil, string(body), fmt.Errorf("Content-Type %q; want the Prometheus text format", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	return fams, string(body), err
}

// value returns the value of the series of family name whose labels
// include want, and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// testMetrics: with --metrics-addr, a running fencelock answers a real
// scrape of /metrics in the Prometheus text format, with its lease held;
// with --log-level and --log-format json, its log lines are JSON and
// carry the backend.
func testMetrics(t *testing.T, b backend) {
	backendName := "etcd"
	if strings.HasPrefix(b.url, "zk://") {
		backendName = "zookeeper"
	}
	name := testutil.UniqueName(t)
	addr := testutil.FreeAddr(t)
	p := start(t, b.url, "--metrics-addr", addr, "--log-level", "debug", "--log-format", "json",
		"run", "--lock", name, "--", "sh", "-c", holdScript)
	tok := parseStarted(t, p.line(30*time.Second))

	var fams map[string]*dto.MetricFamily
	var body string
	testutil.Eventually(t, 30*time.Second, "a scrape of /metrics showing the lease held", func() bool {
		var err error
		fams, body, err = scrape(addr)
		if err != nil {
			return false
		}
		v, ok := value(fams, "fencelock_leases_held", map[string]string{"fencelock_backend": backendName})
		return ok && v == 1
	})
	if f := fams["fencelock_acquire_duration_seconds"]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("/metrics has no histogram fencelock_acquire_duration_seconds:\n%s", body)
	}
	if v, ok := value(fams, "fencelock_acquire_duration_seconds", map[string]string{"fencelock_backend": backendName, "fencelock_outcome": "granted"}); !ok || v != 1 {
		t.Errorf("fencelock_acquire_duration_seconds{outcome=granted} count = %v (%v); want 1:\n%s", v, ok, body)
	}
	if v, ok := value(fams, "fencelock_session_starts_total", map[string]string{"fencelock_backend": backendName}); !ok || v != 1 {
		t.Errorf("fencelock_session_starts_total = %v (%v); want 1:\n%s", v, ok, body)
	}
	if strings.Contains(body, name) {
		t.Errorf("/metrics names the lock %q without a name mapping:\n%s", name, body)
	}

	release(t, p, tok)
	stderr := p.Stderr.String()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatalf("no log lines with --log-level debug")
	}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("log line %q is not JSON: %v", l, err)
			continue
		}
		if rec["backend"] != backendName {
			t.Errorf("log line %q: backend = %v; want %q", l, rec["backend"], backendName)
		}
	}
}
