package clitest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// tokenVar is the variable run passes the token of name in, as the
// command's documentation spells it.
func tokenVar(name string) string {
	return "FENCING_TOKEN_" + strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToUpper(name))
}

// holdAll is holdScript for several names: the command reports
// FENCELOCK_LOCKS and the token of each of names, then waits for a line
// on stdin.
func holdAll(names ...string) string {
	vars := make([]string, len(names))
	for i, n := range names {
		vars[i] = "$" + tokenVar(n)
	}
	return fmt.Sprintf(`echo "started $FENCELOCK_LOCKS %s"; read x; echo done`, strings.Join(vars, " "))
}

// finish lets a command started with holdAll end, and checks that it and
// its fencelock exit 0.
func finish(t testing.TB, p *proc) {
	t.Helper()
	fmt.Fprintln(p.Stdin, "go")
	if l := p.line(30 * time.Second); l != "done" {
		t.Errorf("fencelock %q: command said %q; want done", p.Cmd.Args[1:], l)
	}
	if code, stderr := p.wait(30 * time.Second); code != 0 {
		t.Errorf("fencelock %q: status = %d (stderr %q); want 0", p.Cmd.Args[1:], code, stderr)
	}
}

// startedAll parses the line of holdAll and returns the tokens, checking
// that FENCELOCK_LOCKS listed want.
func startedAll(t testing.TB, line string, want ...string) []uint64 {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 1+2*len(want) || f[0] != "started" || strings.Join(f[1:1+len(want)], " ") != strings.Join(want, " ") {
		t.Fatalf("command said %q; want started, the locks %q and their tokens", line, want)
	}
	toks := make([]uint64, len(want))
	for i := range want {
		toks[i] = parseStarted(t, "started "+f[1+len(want)+i])
	}
	return toks
}

// testSeveral: run with several --lock holds them all, passes each token
// in its own variable, refuses with --try if any is held and takes none,
// serves overlapping sets given in any order without deadlock, and on the
// loss of one name stops the command and releases the others.
func testSeveral(t *testing.T, b backend) {
	base := testutil.UniqueName(t)
	na, nb, nc := base+"/a", base+"/b", base+"/c"
	a := start(t, b.url, "--identity", "multi-A", "run", "--lock", nb, "--lock", na, "--", "sh", "-c", holdAll(na, nb))
	tokA := startedAll(t, a.line(30*time.Second), na, nb)
	holders(t, b, na, "while A holds a and b", fmt.Sprintf("token=%d identity=multi-A", tokA[0]))
	holders(t, b, nb, "while A holds a and b", fmt.Sprintf("token=%d identity=multi-A", tokA[1]))

	// 0 sorts before b: a run that took names one by one would hold it
	// when b is refused.
	n0 := base + "/0"
	for _, flag := range []string{"--try", "--wait=300ms"} {
		code, stdout, stderr := fencelock(t, b.url, "run", flag, "--lock", nb, "--lock", n0, "--", "sh", "-c", "echo ran")
		if code != 75 || stdout != "" {
			t.Errorf("run %s --lock b --lock 0 while A holds b = %d, stdout %q; want 75, nothing", flag, code, stdout)
		}
		oneLine(t, "run "+flag+" of a held set", stderr, fmt.Sprintf("lock %q is held by token=%d identity=multi-A", nb, tokA[1]))
		if n := b.records(t, n0); n != 0 {
			t.Errorf("records of 0 after the refused run %s = %d; want 0 (all or none)", flag, n)
		}
	}

	// B and C want overlapping sets, named in opposite orders; both wait
	// for A, then run one after the other.
	sets := map[*proc][]string{}
	bp := start(t, b.url, "--identity", "multi-B", "run", "--lock", nc, "--lock", nb, "--", "sh", "-c", holdAll(nb, nc))
	cp := start(t, b.url, "--identity", "multi-C", "run", "--lock", nb, "--lock", na, "--", "sh", "-c", holdAll(na, nb))
	sets[bp], sets[cp] = []string{nb, nc}, []string{na, nb}
	testutil.Eventually(t, 30*time.Second, "B and C queued behind A", func() bool {
		return b.records(t, na) == 2 && b.records(t, nb) >= 2
	})
	finish(t, a)
	var first, second *proc
	var line string
	select {
	case line = <-bp.Lines:
		first, second = bp, cp
	case line = <-cp.Lines:
		first, second = cp, bp
	case <-time.After(30 * time.Second):
		t.Fatalf("neither B nor C ran within 30s of A's end (stderr %q, %q)", bp.Stderr.String(), cp.Stderr.String())
	}
	tok1 := startedAll(t, line, sets[first]...)
	if second.Stdout.String() != "" {
		t.Fatalf("B and C ran at once; both want %q", nb)
	}
	finish(t, first)
	tok2 := startedAll(t, second.line(30*time.Second), sets[second]...)
	b1, b2 := tok1[slices.Index(sets[first], nb)], tok2[slices.Index(sets[second], nb)]
	if !(tokA[1] < b1 && b1 < b2) {
		t.Errorf("tokens of b: A %d, then %d, then %d; want rising", tokA[1], b1, b2)
	}
	finish(t, second)
	for _, n := range []string{na, nb, nc} {
		if got := b.records(t, n); got != 0 {
			t.Errorf("records of %q after every run = %d; want 0", n, got)
		}
	}

	// Losing c stops the command and releases a.
	script := `echo "started $FENCELOCK_LOCKS"; while :; do sleep 0.1; done`
	d := start(t, b.url, "run", "--grace", "500ms", "--lock", na, "--lock", nc, "--", "sh", "-c", script)
	if l, want := d.line(30*time.Second), "started "+na+" "+nc; l != want {
		t.Fatalf("command said %q; want %q", l, want)
	}
	if n := b.deleteRecords(t, nc); n != 1 {
		t.Fatalf("deleted %d records of c; want 1", n)
	}
	code, stderr := d.wait(30 * time.Second)
	if i := strings.LastIndex(strings.TrimSuffix(stderr, "\n"), "\n"); i >= 0 {
		stderr = stderr[i+1:]
	}
	if code != 76 {
		t.Errorf("run whose lock c was lost: status = %d; want 76", code)
	}
	oneLine(t, "run whose lock c was lost", stderr, fmt.Sprintf("lost lock %q", nc))
	if n := b.records(t, na); n != 0 {
		t.Errorf("records of a after c was lost = %d; want 0 (released)", n)
	}
}
