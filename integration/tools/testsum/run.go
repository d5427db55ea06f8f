package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// step is one command of a stage; a stage is the sum of its steps. The
// steps of a run are kept one JSON object a line in D/steps.jsonl, the
// events of a step in D/<Events>.
type step struct {
	Stage    string            `json:"stage"`
	Provider string            `json:"provider,omitempty"`
	Command  []string          `json:"command,omitempty"`
	Start    time.Time         `json:"start"`
	Seconds  float64           `json:"seconds"`
	Exit     int               `json:"exit"`
	Env      map[string]string `json:"env,omitempty"` // FENCELOCK_* and CI when it ran
	Events   string            `json:"events,omitempty"`
	// Retried says why this step's failure was set aside and the step
	// run again: only a known toolchain defect, matched exactly (see
	// fuzzDeadlineFlake). The report lists such steps apart and counts
	// neither their exit status nor their tests.
	Retried string `json:"retried,omitempty"`
}

const stepsFile = "steps.jsonl"

func appendStep(dir string, s step) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, stepsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readSteps(dir string) ([]step, error) {
	b, err := os.ReadFile(filepath.Join(dir, stepsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var steps []step
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var s step
		if err := json.Unmarshal(line, &s); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", stepsFile, i+1, err)
		}
		steps = append(steps, s)
	}
	return steps, nil
}

// testEnv is the part of the environment that decides what was asked for.
func testEnv() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "FENCELOCK_") || k == "CI" {
			env[k] = v
		}
	}
	return env
}

// eventsFile returns a new file name for the events of a step of stage.
func eventsFile(dir, stage string) (string, error) {
	for i := 1; ; i++ {
		name := fmt.Sprintf("%s-%03d.jsonl", stage, i)
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return name, f.Close()
	}
}

func cmdRun(args []string) (int, error) {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	dir := fs.String("dir", "", "results directory")
	stage := fs.String("stage", "", "stage name")
	provider := fs.String("provider", "", "cluster provider of the stage (process, containers), if any")
	verbose := fs.Bool("v", false, "print every line of output")
	fs.Parse(args)
	if *dir == "" || *stage == "" || fs.NArg() == 0 {
		return 2, errors.New("run: need -dir, -stage and a command")
	}
	return runStep(*dir, *stage, *provider, *verbose, fs.Args())
}

// runStep runs argv as one step of stage and records it.
func runStep(dir, stage, provider string, verbose bool, argv []string) (int, error) {
	c, _, err := runStepRetry(dir, stage, provider, verbose, argv, nil)
	return c, err
}

// runStepRetry is runStep with a judge of failures: when the step fails
// and retry, given its events, returns a reason, the step is recorded as
// retried for that reason, and retried reports true.
func runStepRetry(dir, stage, provider string, verbose bool, argv []string, retry func(events []byte) string) (code int, retried bool, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 2, false, err
	}
	name, err := eventsFile(dir, stage)
	if err != nil {
		return 2, false, err
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 2, false, err
	}
	defer f.Close()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 2, false, err
	}
	s := step{Stage: stage, Provider: provider, Command: argv, Start: time.Now(), Env: testEnv(), Events: name}
	if err := cmd.Start(); err != nil {
		return 2, false, err
	}
	fmt.Printf("+ %s\n", strings.Join(argv, " "))
	copyErr := follow(out, f, os.Stdout, verbose)
	waitErr := cmd.Wait()
	s.Seconds = time.Since(s.Start).Seconds()
	var exit *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exit):
		s.Exit = exit.ExitCode()
		if s.Exit < 0 { // killed by a signal
			s.Exit = 128
		}
	default:
		s.Exit = 2
	}
	if s.Exit != 0 && retry != nil && copyErr == nil {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			s.Retried = retry(b)
		}
	}
	if err := appendStep(dir, s); err != nil {
		return 2, false, err
	}
	if copyErr != nil {
		return 2, false, copyErr
	}
	return s.Exit, s.Retried != "", nil
}

// follow copies the events from r to events and prints a compact log to
// w: each package's result line, the whole output of every failed test and
// of every failed package, top-level tests that took a second or more, and
// any line that is not an event. verbose prints every output line instead.
func follow(r io.Reader, events io.Writer, w io.Writer, verbose bool) error {
	res := newResults()
	bw := bufio.NewWriter(events)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		ev, ok := parseEvent(line)
		if !ok {
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		bw.Write(line)
		bw.WriteByte('\n')
		res.add(ev)
		if verbose {
			if ev.Action == "output" || ev.Action == "build-output" {
				fmt.Fprint(w, ev.Output)
			}
			continue
		}
		switch {
		case ev.Action == "build-output":
			fmt.Fprint(w, ev.Output)
		case ev.Test != "" && ev.Action == "fail":
			t := res.test(ev.Package, ev.Test)
			fmt.Fprintf(w, "--- FAIL: %s %s (%s)\n", shortPkg(ev.Package), ev.Test, duration(ev.Elapsed))
			for _, l := range t.output {
				if !strings.HasPrefix(l, "=== ") {
					fmt.Fprint(w, "    ", l)
				}
			}
		case ev.Test != "" && !strings.Contains(ev.Test, "/") && (ev.Action == "pass" || ev.Action == "skip") && ev.Elapsed >= 1:
			fmt.Fprintf(w, "    %-4s %s %s (%s)\n", strings.ToUpper(ev.Action), shortPkg(ev.Package), ev.Test, duration(ev.Elapsed))
		case ev.Test == "" && ev.Package != "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"):
			p := res.pkg(ev.Package)
			if ev.Action == "fail" {
				for _, l := range p.output {
					fmt.Fprint(w, l)
				}
				continue
			}
			// The last line is go test's "ok  pkg 1.2s" or "?  pkg [no test files]".
			if n := len(p.output); n > 0 {
				fmt.Fprint(w, p.output[n-1])
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return sc.Err()
}

func cmdRecord(args []string) error {
	fs := flag.NewFlagSet("record", flag.ExitOnError)
	dir := fs.String("dir", "", "results directory")
	stage := fs.String("stage", "", "stage name")
	seconds := fs.Float64("seconds", 0, "wall time of the stage")
	exit := fs.Int("exit", 0, "exit status of the stage")
	fs.Parse(args)
	if *dir == "" || *stage == "" {
		return errors.New("record: need -dir and -stage")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	start := time.Now().Add(-time.Duration(*seconds * float64(time.Second)))
	return appendStep(*dir, step{Stage: *stage, Start: start, Seconds: *seconds, Exit: *exit, Env: testEnv()})
}

var fuzzName = regexp.MustCompile(`^Fuzz\w*$`)

// cmdFuzz finds every Fuzz target of the packages and fuzzes each one in
// turn ("go test -fuzz" takes one target of one package at a time).
func cmdFuzz(args []string) (int, error) {
	fs := flag.NewFlagSet("fuzz", flag.ExitOnError)
	dir := fs.String("dir", "", "results directory")
	fuzztime := fs.String("fuzztime", "5s", "how long to fuzz each target")
	race := fs.Bool("race", false, "fuzz with the race detector")
	verbose := fs.Bool("v", false, "print every line of output")
	fs.Parse(args)
	if *dir == "" {
		return 2, errors.New("fuzz: need -dir")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return 2, err
	}
	pkgs := fs.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	start := time.Now()
	list := exec.Command("go", append([]string{"test", "-list", "^Fuzz"}, pkgs...)...)
	list.Stderr = os.Stderr
	out, err := list.Output()
	listStep := step{Stage: "fuzz", Command: list.Args, Start: start, Seconds: time.Since(start).Seconds(), Env: testEnv()}
	if err != nil {
		listStep.Exit = 1
		appendStep(*dir, listStep)
		return 1, fmt.Errorf("go test -list: %w", err)
	}
	if err := appendStep(*dir, listStep); err != nil {
		return 2, err
	}
	targets := parseFuzzList(string(out))
	fmt.Printf("fuzz: %d targets, %s each\n", len(targets), *fuzztime)
	code := 0
	for _, t := range targets {
		argv := []string{"go", "test", "-json", "-run", "^$", "-fuzz", "^" + t.name + "$", "-fuzztime", *fuzztime}
		if *race {
			argv = append(argv, "-race")
		}
		argv = append(argv, t.pkg)
		c, retried, err := runStepRetry(*dir, "fuzz", "", *verbose, argv, fuzzDeadlineFlake)
		if err == nil && retried {
			// Once: a second failure counts, whatever it looks like.
			fmt.Printf("fuzz: %s failed only with the fuzzing engine's end-of-fuzztime race (go.dev/issue/75804); running it again once\n", t.name)
			c, err = runStep(*dir, "fuzz", "", *verbose, argv)
		}
		if err != nil {
			return 2, err
		}
		if c != 0 {
			code = 1
		}
	}
	return code, nil
}

// fuzzDeadlineFlake returns a reason when a failed "go test -fuzz" run
// shows the fuzzing coordinator's race at the end of -fuzztime, and ""
// otherwise. Up to Go 1.26 the coordinator can report its own deadline
// as the target's failure (go.dev/issue/75804, fixed in Go 1.27): the
// target fails with "context deadline exceeded" as its only message, no
// failing input is written and nothing panicked. Any other output of the
// failed target (a t.Error line, a panic, a crasher) is a real failure.
func fuzzDeadlineFlake(events []byte) string {
	var out strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(events))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		ev, ok := parseEvent(sc.Bytes())
		if ok && ev.Action == "output" {
			out.WriteString(ev.Output)
		}
	}
	text := out.String()
	if !strings.Contains(text, "context deadline exceeded") {
		return ""
	}
	for _, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case l == "", l == "FAIL", l == "PASS", l == "context deadline exceeded",
			strings.HasPrefix(l, "fuzz: elapsed:"), strings.HasPrefix(l, "=== "),
			strings.HasPrefix(l, "--- FAIL: Fuzz"), strings.HasPrefix(l, "exit status "),
			strings.HasPrefix(l, "FAIL\t"), strings.HasPrefix(l, "ok  \t"):
		default:
			return "" // anything else: the target's own failure
		}
	}
	return "go.dev/issue/75804: the fuzzing engine reported its -fuzztime deadline as a failure (no failing input, no other message)"
}

// fuzzTarget is one Fuzz function of one package.
type fuzzTarget struct{ pkg, name string }

// parseFuzzList reads the output of "go test -list ^Fuzz": each package's
// names, then its "ok  <package> <time>" line.
func parseFuzzList(out string) []fuzzTarget {
	var targets, pending []fuzzTarget
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 1 && fuzzName.MatchString(fields[0]):
			pending = append(pending, fuzzTarget{name: fields[0]})
		case len(fields) >= 2 && fields[0] == "ok":
			for _, t := range pending {
				t.pkg = fields[1]
				targets = append(targets, t)
			}
			pending = nil
		}
	}
	return targets
}
