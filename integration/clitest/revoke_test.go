package clitest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/integration/internal/testutil"
)

// queueLine is one line of "fencelock queue" for an exclusive request;
// etcd knows no creation time, ZooKeeper does.
var queueLine = regexp.MustCompile(`^position=(\d+) (held|waiting) token=(\d+) identity=(\S+)( since=\d{4}-\d\d-\d\dT[0-9:.]+Z)?$`)

// queued is one parsed line of "fencelock queue".
type queued struct {
	position int
	state    string
	token    uint64
	identity string
}

// queue runs "fencelock queue name", requires status 0, and returns its
// lines parsed.
func queue(t testing.TB, b backend, name, when string) []queued {
	t.Helper()
	code, stdout, stderr := fencelock(t, b.url, "queue", name)
	if code != 0 || stderr != "" {
		t.Fatalf("queue %s = %d, %q (stderr %q); want 0 and no stderr", when, code, stdout, stderr)
	}
	var out []queued
	for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		m := queueLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("queue %s: line %q; want %v", when, l, queueLine)
		}
		pos, _ := strconv.Atoi(m[1])
		tok, _ := strconv.ParseUint(m[3], 10, 64)
		out = append(out, queued{pos, m[2], tok, m[4]})
	}
	return out
}

// checkQueue requires q to list the holder (token holderTok) and then the
// waiters, in want's order (identities; the first is the holder), at
// positions 0, 1, ..., with increasing tokens, and returns the waiters'
// tokens.
func checkQueue(t testing.TB, q []queued, when string, holderTok uint64, want ...string) []uint64 {
	t.Helper()
	var got []string
	for _, e := range q {
		got = append(got, e.identity)
	}
	if len(q) != len(want) || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("queue %s lists %q; want %q in this order", when, got, want)
	}
	var waiters []uint64
	for i, e := range q {
		state := "waiting"
		if i == 0 {
			state = "held"
		}
		if e.position != i || e.state != state {
			t.Errorf("queue %s, line %d = %+v; want position %d %s", when, i, e, i, state)
		}
		if i == 0 && e.token != holderTok {
			t.Errorf("queue %s: holder's token = %d; want %d", when, e.token, holderTok)
		}
		if i > 0 {
			if e.token <= q[i-1].token {
				t.Errorf("queue %s: %s's token %d is not above %s's %d", when, e.identity, e.token, q[i-1].identity, q[i-1].token)
			}
			waiters = append(waiters, e.token)
		}
	}
	return waiters
}

// testQueue: queue lists the holder and then the waiters in the order
// they came, moves on when the holder leaves, and exits 3 for a free lock.
func testQueue(t *testing.T, b backend) {
	name := testutil.UniqueName(t)
	code, _, stderr := fencelock(t, b.url, "queue", name)
	if code != 3 {
		t.Errorf("queue of a free lock: status = %d; want 3", code)
	}
	oneLine(t, "queue of a free lock", stderr, "is free and nobody waits")

	run := func(id string) *proc {
		return start(t, b.url, "--identity", id, "run", "--lock", name, "--", "sh", "-c", holdScript)
	}
	h := run("q-holder")
	tokH := parseStarted(t, h.line(30*time.Second))
	w1 := run("q-waiter-1")
	testutil.Eventually(t, 30*time.Second, "waiter 1 queued", func() bool { return b.records(t, name) == 2 })
	w2 := run("q-waiter-2")
	testutil.Eventually(t, 30*time.Second, "waiter 2 queued", func() bool { return b.records(t, name) == 3 })

	waiters := checkQueue(t, queue(t, b, name, "with a holder and two waiters"), "with a holder and two waiters",
		tokH, "q-holder", "q-waiter-1", "q-waiter-2")

	release(t, h, tokH)
	tok1 := parseStarted(t, w1.line(30*time.Second))
	if tok1 != waiters[0] {
		t.Errorf("waiter 1 was granted token %d; queue listed it with %d", tok1, waiters[0])
	}
	checkQueue(t, queue(t, b, name, "after the holder left"), "after the holder left", tok1, "q-waiter-1", "q-waiter-2")
	release(t, w1, tok1)
	tok2 := parseStarted(t, w2.line(30*time.Second))
	if tok2 != waiters[1] {
		t.Errorf("waiter 2 was granted token %d; queue listed it with %d", tok2, waiters[1])
	}
	release(t, w2, tok2)
	if n := b.records(t, name); n != 0 {
		t.Errorf("records of %q after every run = %d; want 0", name, n)
	}
}

// testRevoke: revoke with a token that is not the holder's (a waiter's,
// an unused one) exits 3 and changes nothing; with the holder's token it
// exits 0, the holder's run stops its command and exits 76 (lease lost),
// and the waiter is granted.
func testRevoke(t *testing.T, b backend) {
	name := testutil.UniqueName(t)
	script := `trap 'echo got TERM; exit 0' TERM; echo "started $FENCING_TOKEN"; while :; do sleep 0.1; done`
	h := start(t, b.url, "--identity", "r-holder", "run", "--grace", "5s", "--lock", name, "--", "sh", "-c", script)
	tokH := parseStarted(t, h.line(30*time.Second))
	w := start(t, b.url, "--identity", "r-waiter", "run", "--lock", name, "--", "sh", "-c", holdScript)
	testutil.Eventually(t, 30*time.Second, "waiter queued", func() bool { return b.records(t, name) == 2 })
	tokW := checkQueue(t, queue(t, b, name, "before the revocation"), "before the revocation", tokH, "r-holder", "r-waiter")[0]

	for _, tok := range []uint64{tokW, tokH - 1, tokW + 1_000_000} {
		code, stdout, stderr := fencelock(t, b.url, "revoke", name, "--token", strconv.FormatUint(tok, 10))
		if code != 3 || stdout != "" {
			t.Errorf("revoke --token %d (not the holder's %d) = %d, stdout %q; want 3, nothing", tok, tokH, code, stdout)
		}
		oneLine(t, fmt.Sprintf("revoke --token %d", tok), stderr, fmt.Sprintf("has no holder with token %d", tok))
	}
	checkQueue(t, queue(t, b, name, "after the refused revocations"), "after the refused revocations", tokH, "r-holder", "r-waiter")
	if !h.Running() || w.Stdout.String() != "" {
		t.Fatalf("after the refused revocations: holder running %v, waiter's stdout %q; want running, nothing", h.Running(), w.Stdout.String())
	}

	code, stdout, stderr := fencelock(t, b.url, "revoke", "--token", strconv.FormatUint(tokH, 10), name)
	if want := fmt.Sprintf("revoked token=%d\n", tokH); code != 0 || stdout != want || stderr != "" {
		t.Fatalf("revoke --token %d (the holder's) = %d, %q (stderr %q); want 0, %q", tokH, code, stdout, stderr, want)
	}
	if l := h.line(30 * time.Second); l != "got TERM" {
		t.Errorf("revoked holder's command said %q; want got TERM", l)
	}
	code, stderr = h.wait(30 * time.Second)
	if code != 76 {
		t.Errorf("revoked holder's run: status = %d (stderr %q); want 76", code, stderr)
	}
	// The shell may report its killed sleep; fencelock's own error is
	// the last line, and it carries the lease's cause.
	if i := strings.LastIndex(strings.TrimSuffix(stderr, "\n"), "\n"); i >= 0 {
		stderr = stderr[i+1:]
	}
	oneLine(t, "revoked holder's run", stderr, "lost lock")
	if !strings.Contains(stderr, "deleted by another client") && !strings.Contains(stderr, "revoked") {
		t.Errorf("revoked holder's run: stderr = %q; want the cause to say its record was deleted or revoked", stderr)
	}
	tok := parseStarted(t, w.line(30*time.Second))
	if tok != tokW {
		t.Errorf("waiter granted token %d; want its queued token %d", tok, tokW)
	}
	holders(t, b, name, "after the revocation", fmt.Sprintf("token=%d identity=r-waiter", tokW))
	release(t, w, tokW)
	if n := b.records(t, name); n != 0 {
		t.Errorf("records of %q after every run = %d; want 0", name, n)
	}
}
