package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// The part of TestBench's JSON the report uses: more of it than the
// charts draw. Rows carry a ratio object when the run measured the ratio
// window by window; older results have none, and the report computes the
// ratio from the rows' aggregates instead.

// errReport is wrapped by every error of -report that is about the
// documents or the results rather than the command line.
var errReport = errors.New("bench report")

// reportRun is one results file as the report reads it.
type reportRun struct {
	Started  time.Time       `json:"started"`
	Machine  reportMachine   `json:"machine"`
	Config   config          `json:"config"`
	Backends []reportBackend `json:"backends"`

	path string // as read
	name string // as the document names it
}

type reportMachine struct {
	CPU          string `json:"cpu"`
	NumCPU       int    `json:"num_cpu"`
	LoadAvgStart string `json:"loadavg_start"`
}

type reportBackend struct {
	Backend       string           `json:"backend"`
	ServerVersion string           `json:"server_version"`
	Uncontended   []uncontended    `json:"uncontended"`
	Contended     []contendedRow   `json:"contended"`
	Failover      []failover       `json:"failover"`
	Leases        []leasesRow      `json:"leases"`
	Waiters       []waiters        `json:"waiters"`
	Shared        []sharedRow      `json:"shared"`
	Semaphore     []sharedRow      `json:"semaphore"`
	TLS           []uncontended    `json:"tls"`
	LockDelay     []contendedRow   `json:"lockdelay"`
	Interop       []contendedRow   `json:"interop"`
	Multi         []multiRow       `json:"multi"`
	Targets       []target         `json:"targets"`
	Scale         *scaleReport     `json:"scale"`
	Overheads     []overheadResult `json:"overheads"`
}

// ratio is a fencelock row's ratio to its reference, measured window by
// window in alternating order: the median and range over the windows.
type ratio struct {
	Metric    string    `json:"metric"`
	Better    string    `json:"better"` // "higher" or "lower"
	Median    float64   `json:"median"`
	Min       float64   `json:"min"`
	Max       float64   `json:"max"`
	PerWindow []float64 `json:"per_window"`
	Order     []string  `json:"order"`
}

type uncontended struct {
	Recipe           string  `json:"recipe"`
	Role             string  `json:"role"`
	Latency          dist    `json:"latency"`
	CyclesPerSec     float64 `json:"cycles_per_sec"`
	RequestsPerCycle float64 `json:"requests_per_cycle"`
	ClientCPUUs      float64 `json:"client_cpu_us_per_cycle"`
	Ratio            *ratio  `json:"ratio"`
}

type contendedRow struct {
	Recipe           string  `json:"recipe"`
	Role             string  `json:"role"`
	Clients          int     `json:"clients"`
	HoldMs           float64 `json:"hold_ms"`
	GrantsPerSec     float64 `json:"grants_per_sec"`
	Handoff          dist    `json:"handoff"`
	RequestsPerGrant float64 `json:"requests_per_grant"`
	EventsPerGrant   float64 `json:"watch_events_per_grant"`
	Ratio            *ratio  `json:"ratio"`
	Slower           *ratio  `json:"slower"` // a mixed interop row's, to the slower recipe
}

// multiRow is one way (AcquireAll or sorted Acquire) of taking sets of
// names on one "multi" row.
type multiRow struct {
	Way            string  `json:"way"`
	Clients        int     `json:"clients"`
	Pool           int     `json:"pool"`
	SetMin         int     `json:"set_min"`
	SetMax         int     `json:"set_max"`
	SetsPerSec     float64 `json:"sets_per_sec"`
	Acquire        dist    `json:"acquire"`
	RequestsPerSet float64 `json:"requests_per_set"`
	Ratio          *ratio  `json:"ratio"` // AcquireAll's, to sorted Acquire
}

type failover struct {
	Recipe   string  `json:"recipe"`
	Role     string  `json:"role"`
	TTLSec   float64 `json:"ttl_sec"`
	MedianMs float64 `json:"median_ms"`
	Ratio    *ratio  `json:"ratio"`
}

type leasesRow struct {
	Recipe             string  `json:"recipe"`
	Role               string  `json:"role"`
	Leases             int     `json:"leases"`
	HeapBytesPerLease  float64 `json:"heap_bytes_per_lease"`
	GoroutinesPerLease float64 `json:"goroutines_per_lease"`
	Ratio              *ratio  `json:"ratio"`
}

type waiters struct {
	Recipe   string  `json:"recipe"`
	Role     string  `json:"role"`
	Waiters  int     `json:"waiters"`
	ServeSec float64 `json:"serve_sec"`
	Ratio    *ratio  `json:"ratio"`
}

type sharedRow struct {
	Recipe           string  `json:"recipe"`
	Role             string  `json:"role"`
	Readers          int     `json:"readers"`
	Writers          int     `json:"writers"`
	Limit            int     `json:"limit"`
	GrantsPerSec     float64 `json:"grants_per_sec"`
	Handoff          dist    `json:"handoff"`
	MaxHolders       int     `json:"max_holders"`
	RequestsPerGrant float64 `json:"requests_per_grant"`
	EventsPerGrant   float64 `json:"events_per_grant"`
	Ratio            *ratio  `json:"ratio"`
}

type scaleReport struct {
	Leases  []scaleLeases  `json:"leases"`
	Lockers []scaleLockers `json:"lockers"`
}

type scaleLeases struct {
	Recipe            string  `json:"recipe"`
	Role              string  `json:"role"`
	Leases            int     `json:"leases"`
	HeapBytesPerLease float64 `json:"heap_bytes_per_lease"`
	Ratio             *ratio  `json:"ratio"`
}

type scaleLockers struct {
	Recipe           string  `json:"recipe"`
	Role             string  `json:"role"`
	Lockers          int     `json:"lockers"`
	Names            int     `json:"names"`
	GrantsPerSec     float64 `json:"grants_per_sec"`
	RequestsPerGrant float64 `json:"requests_per_grant"`
	Ratio            *ratio  `json:"ratio"`
}

// overheadResult is the cost of one feature (metrics, tracing, TLS):
// the ratio of a metric with it on to the same metric with it off, over
// interleaved pairs, with its 95% confidence interval.
type overheadResult struct {
	What     string  `json:"what"`
	Metric   string  `json:"metric"`
	Ratio    float64 `json:"ratio"`
	CI95Low  float64 `json:"ci95_low"`
	CI95High float64 `json:"ci95_high"`
	Pairs    int     `json:"pairs"`
	Met1Pct  bool    `json:"met_1pct"`
}

// loadReportRun reads one results file for the report. Unlike the
// charts, the report takes a file with any rows, scale rows alone
// included.
func loadReportRun(path string) (*reportRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errReport, err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("%w: %s: empty file, not a bench-results JSON file", errReport, path)
	}
	var r reportRun
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %s: not a bench-results JSON file: %w", errReport, path, err)
	}
	if len(r.Backends) == 0 {
		return nil, fmt.Errorf("%w: %s: no backends in the results", errReport, path)
	}
	r.path, r.name = path, path
	return &r, nil
}
