package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"time"
)

// The part of TestBench's JSON the charts use. The field names are those of
// the report, backendReport, stats and result types in package benchtest;
// every other field is ignored.

// benchRun is one bench-results file.
type benchRun struct {
	// Note is not written by TestBench: a line added by hand to a results
	// file, shown in the captions (say, where hand-made figures came from).
	Note     string    `json:"note"`
	Started  time.Time `json:"started"`
	Machine  machine   `json:"machine"`
	Config   config    `json:"config"`
	Backends []backend `json:"backends"`

	path string // the file it was read from
}

type machine struct {
	CPU    string `json:"cpu"`
	NumCPU int    `json:"num_cpu"`
}

type config struct {
	Quick    bool   `json:"quick"`
	Provider string `json:"provider"`
}

type backend struct {
	Backend       string      `json:"backend"`
	ServerVersion string      `json:"server_version"`
	Members       int         `json:"members"`
	Contended     []contended `json:"contended"`
	Leases        []leases    `json:"leases"`
	Shared        []shared    `json:"shared"`
	Semaphore     []shared    `json:"semaphore"`
	Targets       []target    `json:"targets"`
}

// target is one target line of a run: what it asks, the run's figure,
// and whether the run met it.
type target struct {
	What   string `json:"what"`
	Figure string `json:"figure"`
	Met    bool   `json:"met"`
}

// dist is a latency distribution in milliseconds. Results written before
// the quartiles and the 10th and 90th percentiles were added have only
// P50 and P99 (the others decode as 0).
type dist struct {
	N   int     `json:"n"`
	P10 float64 `json:"p10_ms"`
	P25 float64 `json:"p25_ms"`
	P50 float64 `json:"p50_ms"`
	P75 float64 `json:"p75_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
}

// hasQuartiles reports whether d carries more than its p50 and p99.
func (d dist) hasQuartiles() bool { return d.P25 > 0 && d.P75 > 0 }

type contended struct {
	Recipe  string `json:"recipe"`
	Role    string `json:"role"`
	Clients int    `json:"clients"`
	// HoldMs is how long each grant was held; results written before
	// the rows had a hold have none, and held nothing (0).
	HoldMs       float64 `json:"hold_ms"`
	GrantsPerSec float64 `json:"grants_per_sec"`
	Handoff      dist    `json:"handoff"`
}

type leases struct {
	Recipe            string  `json:"recipe"`
	Role              string  `json:"role"`
	Leases            int     `json:"leases"`
	HeapBytesPerLease float64 `json:"heap_bytes_per_lease"`
}

// shared is a row of the read-write lock or the semaphore measurement.
type shared struct {
	Recipe       string  `json:"recipe"`
	Role         string  `json:"role"`
	Readers      int     `json:"readers"` // shared clients, or permit clients
	Writers      int     `json:"writers"`
	Limit        int     `json:"limit"`
	GrantsPerSec float64 `json:"grants_per_sec"`
}

// loadRuns reads and checks every file. Any error names the file.
func loadRuns(paths []string) ([]*benchRun, error) {
	var runs []*benchRun
	for _, p := range paths {
		r, err := loadRun(p)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, nil
}

func loadRun(path string) (*benchRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("%s: empty file, not a bench-results JSON file", path)
	}
	var r benchRun
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: not a bench-results JSON file: %w", path, err)
	}
	r.path = path
	if len(r.Backends) == 0 {
		return nil, fmt.Errorf("%s: no backends in the results (a run that measured nothing, or not a bench-results file)", path)
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !r.hasRows() {
		return nil, fmt.Errorf("%s: no contended, leases, read-write or semaphore rows to draw", path)
	}
	return &r, nil
}

// check rejects figures no chart can draw: NaN, infinities, negative rates
// and latencies, and rows that do not say what they are.
func (r *benchRun) check() error {
	var errs []error
	bad := func(where string, v float64, mayBeNegative bool) {
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			errs = append(errs, fmt.Errorf("%s = %v; want a finite figure", where, v))
		case v < 0 && !mayBeNegative:
			errs = append(errs, fmt.Errorf("%s = %v; want a figure ≥ 0", where, v))
		}
	}
	for _, b := range r.Backends {
		if b.Backend == "" {
			errs = append(errs, errors.New("a backend without a name"))
			continue
		}
		for _, c := range b.Contended {
			where := fmt.Sprintf("%s contended %q, %d clients", b.Backend, c.Recipe, c.Clients)
			if c.Recipe == "" || c.Clients <= 0 {
				errs = append(errs, fmt.Errorf("%s: want a recipe and a number of clients > 0", where))
			}
			bad(where+": grants_per_sec", c.GrantsPerSec, false)
			bad(where+": hold_ms", c.HoldMs, false)
			for _, q := range []struct {
				name string
				v    float64
			}{{"p10", c.Handoff.P10}, {"p25", c.Handoff.P25}, {"p50", c.Handoff.P50}, {"p75", c.Handoff.P75}, {"p90", c.Handoff.P90}, {"p99", c.Handoff.P99}} {
				bad(where+": handoff "+q.name, q.v, false)
			}
		}
		for _, l := range b.Leases {
			if l.Recipe == "" {
				errs = append(errs, fmt.Errorf("%s leases: a row without a recipe", b.Backend))
			}
			// Heap growth divided by the leases can come out slightly
			// negative when a collection frees more than the leases add.
			bad(fmt.Sprintf("%s leases %q: heap_bytes_per_lease", b.Backend, l.Recipe), l.HeapBytesPerLease, true)
		}
		for _, rows := range [][]shared{b.Shared, b.Semaphore} {
			for _, s := range rows {
				where := fmt.Sprintf("%s %q, %d readers, %d writers, limit %d", b.Backend, s.Recipe, s.Readers, s.Writers, s.Limit)
				if s.Recipe == "" {
					errs = append(errs, fmt.Errorf("%s: a row without a recipe", where))
				}
				bad(where+": grants_per_sec", s.GrantsPerSec, false)
			}
		}
		for _, s := range b.Semaphore {
			// The semaphore chart puts the clients on a log axis.
			if s.Readers <= 0 {
				errs = append(errs, fmt.Errorf("%s semaphore %q: %d clients; want > 0", b.Backend, s.Recipe, s.Readers))
			}
		}
	}
	return errors.Join(errs...)
}

func (r *benchRun) hasRows() bool {
	for _, b := range r.Backends {
		if len(b.Contended)+len(b.Leases)+len(b.Shared)+len(b.Semaphore) > 0 {
			return true
		}
	}
	return false
}
