package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"
)

// event is one line of "go test -json" (see "go doc test2json").
type event struct {
	Time        time.Time `json:",omitempty"`
	Action      string
	Package     string  `json:",omitempty"`
	ImportPath  string  `json:",omitempty"` // build-output, build-fail
	Test        string  `json:",omitempty"`
	Elapsed     float64 `json:",omitempty"`
	Output      string  `json:",omitempty"`
	FailedBuild string  `json:",omitempty"`
}

// parseEvent decodes line if it is a test2json event.
func parseEvent(line []byte) (event, bool) {
	var ev event
	if len(line) == 0 || line[0] != '{' {
		return ev, false
	}
	if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
		return ev, false
	}
	return ev, true
}

// test is what one stream says about one test or subtest.
type test struct {
	pkg, name string
	status    string // "pass", "fail", "skip", or "" if it never ended
	elapsed   float64
	output    []string
	parent    bool // it has subtests
}

// pkgResult is what one stream says about one package.
type pkgResult struct {
	name    string
	status  string // "pass", "fail", "skip" (no test files), or ""
	elapsed float64
	output  []string // package-level output, build output included
}

// results collects the events of one or more streams.
type results struct {
	tests  map[string]*test // by pkg + "\x00" + name
	order  []string
	pkgs   map[string]*pkgResult
	porder []string
}

func newResults() *results {
	return &results{tests: map[string]*test{}, pkgs: map[string]*pkgResult{}}
}

func (r *results) pkg(name string) *pkgResult {
	p := r.pkgs[name]
	if p == nil {
		p = &pkgResult{name: name}
		r.pkgs[name] = p
		r.porder = append(r.porder, name)
	}
	return p
}

func (r *results) test(pkg, name string) *test {
	key := pkg + "\x00" + name
	t := r.tests[key]
	if t == nil {
		t = &test{pkg: pkg, name: name}
		r.tests[key] = t
		r.order = append(r.order, key)
		// A subtest makes every test above it a parent. Subtest names
		// may contain "/" themselves, so only tests seen before count.
		for i := strings.LastIndexByte(name, '/'); i > 0; i = strings.LastIndexByte(name[:i], '/') {
			if p := r.tests[pkg+"\x00"+name[:i]]; p != nil {
				p.parent = true
			}
		}
	}
	return t
}

// add records ev and returns the test or package it ended, if any.
func (r *results) add(ev event) {
	switch {
	case ev.Action == "build-output":
		p := r.pkg(ev.ImportPath)
		p.output = append(p.output, ev.Output)
	case ev.Action == "build-fail":
		r.pkg(ev.ImportPath).status = "fail"
	case ev.Test == "":
		if ev.Package == "" {
			return
		}
		p := r.pkg(ev.Package)
		switch ev.Action {
		case "output":
			p.output = append(p.output, ev.Output)
		case "pass", "fail", "skip":
			p.status, p.elapsed = ev.Action, ev.Elapsed
		}
	default:
		t := r.test(ev.Package, ev.Test)
		switch ev.Action {
		case "output":
			t.output = append(t.output, ev.Output)
		case "pass", "fail", "skip":
			t.status, t.elapsed = ev.Action, ev.Elapsed
		}
	}
}

// read adds every event of a stream; other lines are ignored.
func (r *results) read(rd io.Reader) error {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if ev, ok := parseEvent(sc.Bytes()); ok {
			r.add(ev)
		}
	}
	return sc.Err()
}

// An outcome is how one test counts in the summary. Parents count only for
// what their subtests do not show: a failure or skip of their own, or not
// ending.
type outcome struct {
	t      *test
	status string // "pass", "fail", "skip"
	reason string // why it was skipped, or why it counts as failed
}

// outcomes returns the tests that count, in the order they were first seen.
func (r *results) outcomes() []outcome {
	var out []outcome
	for _, key := range r.order {
		t := r.tests[key]
		switch {
		case !t.parent:
			switch t.status {
			case "":
				out = append(out, outcome{t, "fail", "did not finish (timeout, panic or crash of the test binary)"})
			case "skip":
				out = append(out, outcome{t, "skip", skipReason(t.output)})
			default:
				out = append(out, outcome{t, t.status, ""})
			}
		case t.status == "skip":
			out = append(out, outcome{t, "skip", skipReason(t.output)})
		case (t.status == "fail" || t.status == "") && !r.descendantFailed(t):
			why := "failed outside its subtests"
			if t.status == "" {
				why = "did not finish (timeout, panic or crash of the test binary)"
			}
			out = append(out, outcome{t, "fail", why})
		}
	}
	return out
}

func (r *results) descendantFailed(p *test) bool {
	prefix := p.name + "/"
	for _, key := range r.order {
		t := r.tests[key]
		if t.pkg == p.pkg && strings.HasPrefix(t.name, prefix) && (t.status == "fail" || t.status == "") {
			return true
		}
	}
	return false
}

// packageFailures returns the packages that failed although none of their
// tests did: a build error, TestMain, a leak check, a crash between tests.
func (r *results) packageFailures() []*pkgResult {
	failedTest := map[string]bool{}
	for _, key := range r.order {
		t := r.tests[key]
		if t.status == "fail" || t.status == "" {
			failedTest[t.pkg] = true
		}
	}
	var out []*pkgResult
	for _, name := range r.porder {
		p := r.pkgs[name]
		if p.status == "fail" && !failedTest[name] {
			out = append(out, p)
		}
	}
	return out
}

var (
	sourcePrefix = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)
	notRequested = regexp.MustCompile(`not requested: (FENCELOCK_[A-Z_]+)=([^\s;,()]+(?:,[^\s;,()]+)*)`)
)

// skipReason picks the message a skipped test gave: the last line written
// by t.Log or t.Skip (those start with "file.go:NN: ").
func skipReason(lines []string) string {
	reason := ""
	for _, l := range lines {
		l = strings.TrimRight(l, "\r\n")
		if loc := sourcePrefix.FindStringIndex(l); loc != nil {
			reason = strings.TrimSpace(l[loc[1]:])
		}
	}
	if reason == "" {
		return "(no reason given)"
	}
	return reason
}

// requested reports whether a skip with this reason was asked for: it must
// say "not requested: VAR=VALUE" and VAR must have been VALUE, not empty,
// when the tests ran.
func requested(reason string, env map[string]string) bool {
	m := notRequested.FindStringSubmatch(reason)
	if m == nil {
		return false
	}
	v := env[m[1]]
	return v != "" && v == m[2]
}

// Backends, as the summary names them.
const (
	backendEtcd = "etcd"
	backendZK   = "zookeeper"
	backendNone = "none"
	backendUnit = "memory/unit"
)

// backendOf maps an integration test to the backend it exercises:
// package etcdtest or zktest; else a name element "etcd" or "zookeeper"
// (the subtests of TestHarness, TestElection, TestFault, ...); else the top
// test's name (TestGuardEtcd, TestCLIZooKeeper, TestZK...). What matches
// none of these runs no lock backend (proxy, SQL and helper tests).
func backendOf(pkg, name string) string {
	switch {
	case strings.HasSuffix(pkg, "/etcdtest"):
		return backendEtcd
	case strings.HasSuffix(pkg, "/zktest"):
		return backendZK
	}
	for _, el := range strings.Split(name, "/") {
		switch strings.ToLower(el) {
		case "etcd":
			return backendEtcd
		case "zookeeper", "zk":
			return backendZK
		}
	}
	top, _, _ := strings.Cut(name, "/")
	switch {
	case strings.Contains(top, "Etcd"):
		return backendEtcd
	case strings.HasPrefix(top, "TestZK"), strings.Contains(top, "ZooKeeper"):
		return backendZK
	}
	return backendNone
}

// shortPkg drops the module path up to the repository's own packages.
func shortPkg(pkg string) string {
	for _, p := range []string{"github.com/fencelock/fencelock/integration/", "github.com/fencelock/fencelock/"} {
		if s, ok := strings.CutPrefix(pkg, p); ok {
			return s
		}
	}
	return pkg
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// duration formats seconds as 1h02m03s, 4m05s or 6.7s.
func duration(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm%02ds", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
}
