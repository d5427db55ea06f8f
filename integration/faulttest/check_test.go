package faulttest

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fencelock/integration/cluster"
)

// never stands for "no end": the return time of an operation whose outcome
// is unknown, the end of a belief that never ended.
const never = int64(math.MaxInt64 / 2)

// window is a span of the shared clock.
type window struct{ from, to int64 }

// serverFreeze is one server frozen (SIGSTOP, docker pause) and resumed.
type serverFreeze struct {
	member string
	// leader says whether the member led the cluster when it was frozen,
	// by the cluster's Leader() query made just before the freeze; a
	// failed query counts as "not the leader", which excuses nothing.
	leader bool
	// from is when the freeze was requested, to when the resume was
	// requested (never if it was not): the member can act again from to
	// on, so an overlap it causes on resuming starts at or after to.
	from, to int64
}

// history is everything a run recorded, as the checkers need it.
type history struct {
	name    string
	backend cluster.Kind
	// ttl is the lease TTL (etcd) or session timeout (ZooKeeper) of the
	// run, which bounds how long after a resume an overlap can be blamed
	// on the resumed server.
	ttl     time.Duration
	clients map[int][]event // by client id
	server  []serverEvent
	final   map[int64]bool // the register's set at the end
	finalN  int
	finalS  uint64
	end     int64            // when the history ended
	frozen  map[int][]window // when each client was frozen (SIGSTOP)
	// serverFreezes are the servers frozen during the run, in order.
	serverFreezes []serverFreeze
	killed        map[int]int64 // when clients were killed
	// revoked are the grants revoked by the test (lock.Revoker), by
	// token.
	revoked map[uint64]revocation
	healed  int64        // when the last fault ended
	live    map[int]bool // clients that kept trying to the end
	fenced  bool
	// limit is the semaphore workload's limit; 0 in the other workloads,
	// whose clients take no permits.
	limit int
	// lockDelay is the lock-delay the checker requires after each record
	// in vanished (0: no lock-delay check).
	lockDelay time.Duration
	vanished  []vanish
	// multi is set in the multi workload, whose history checkMulti
	// splits by name; evidence is set in the history of one name: by
	// token, when a request carrying any token of the same grant was
	// refused (see refusedSince).
	multi    *multiHistory
	evidence map[uint64][]int64
}

// stats counts what a run did; summed over runs for the chaos table.
type stats struct {
	Runs          int
	Ops           int // read-modify-writes attempted
	Grants        int
	Lost          int // leases and waits that ended with ErrLost
	Faults        int // faults injected
	Missed        int // faults that could not be confirmed
	WritesOK      int
	WritesStale   int // refused by the register's token check
	WritesUnknown int
	WritesFailed  int // refused for another reason, or never sent
	ReadsStale    int
	// FrozenClient counts belief overlaps where the older holder's client
	// was frozen (SIGSTOP) when the server had ended its grant, believed
	// no longer than the freeze explains, and had a request refused as
	// stale (see frozenExcuse): the case fencing exists for, since a
	// paused holder cannot see Done. Overlaps are counted per pair of
	// grants, so one long freeze during which several grants follow
	// counts several.
	FrozenClient int
	// Revoked counts belief overlaps (per pair of grants) with an older
	// holder whose grant the test had revoked before the newer grant and
	// whose client, running again, had not yet heard of it; each one
	// fenced (see revokedExcuse).
	Revoked int
	// Excused counts belief overlaps (per pair of grants) excused by etcd
	// issues 12528 and 15247 (a resumed former leader revoking leases its
	// successor kept alive), each one fenced; see serverExcuse.
	Excused int
	// SharedOverlaps counts overlaps of two read locks' beliefs, which
	// the read-write rules allow: they show that readers did share.
	SharedOverlaps int
	// Permits counts the semaphore's grants, MaxPermits the most permit
	// beliefs held at once, PermitsFrozen the grants that found the limit
	// exceeded only by frozen holders' own stale permits (permitExcuse),
	// and PermitsExcused those whose excess etcd issues 12528 and 15247
	// explain (serverExcuse).
	Permits, MaxPermits, PermitsFrozen, PermitsExcused int
	// DelayedGrants counts the grants checked against a lock-delay (one
	// per crashed holder); DelayLow and DelayHigh are the least, over
	// those grants, of the time from the record's disappearance to the
	// grant: at least DelayLow (from the first listing without the
	// record) and at most DelayHigh (from the last one with it).
	DelayedGrants       int
	DelayLow, DelayHigh time.Duration

	Violations int
	Elapsed    time.Duration
}

func (s *stats) add(o stats) {
	s.Runs += o.Runs
	s.Ops += o.Ops
	s.Grants += o.Grants
	s.Lost += o.Lost
	s.Faults += o.Faults
	s.Missed += o.Missed
	s.WritesOK += o.WritesOK
	s.WritesStale += o.WritesStale
	s.WritesUnknown += o.WritesUnknown
	s.WritesFailed += o.WritesFailed
	s.ReadsStale += o.ReadsStale
	s.FrozenClient += o.FrozenClient
	s.Excused += o.Excused
	s.Revoked += o.Revoked
	s.SharedOverlaps += o.SharedOverlaps
	s.Permits += o.Permits
	s.MaxPermits = max(s.MaxPermits, o.MaxPermits)
	s.PermitsFrozen += o.PermitsFrozen
	s.PermitsExcused += o.PermitsExcused
	if o.DelayedGrants > 0 {
		if s.DelayedGrants == 0 {
			s.DelayLow, s.DelayHigh = o.DelayLow, o.DelayHigh
		}
		s.DelayLow, s.DelayHigh = min(s.DelayLow, o.DelayLow), min(s.DelayHigh, o.DelayHigh)
	}
	s.DelayedGrants += o.DelayedGrants
	s.Violations += o.Violations
	s.Elapsed += o.Elapsed
}

// regState is the model's state: the set's size and hash.
type regState struct {
	n   int
	sum uint64
}

// modelInput is one operation on the register. A read-modify-write is one
// operation from its read's invocation to its write's answer: it read
// state read and appended op. A read is a read-modify-write whose write
// was refused (or a final read), so only its read counts.
type modelInput struct {
	rmw  bool
	op   int64
	read regState
}

// modelOutput is what the operation returned: for a read, the state seen;
// for a read-modify-write, whether its outcome is unknown.
type modelOutput struct {
	seen    regState
	unknown bool
}

// setModel is a set with atomic "read, then append" operations. An
// operation of unknown outcome may or may not have been applied.
var setModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(regState), input.(modelInput), output.(modelOutput)
		if !in.rmw {
			if s == out.seen {
				return []any{s}
			}
			return nil
		}
		next := regState{n: s.n + 1, sum: s.sum + elemHash(in.op)}
		switch {
		case s != in.read && out.unknown:
			return []any{s} // it cannot have been applied
		case s != in.read:
			return nil
		case out.unknown:
			return []any{s, next}
		}
		return []any{next}
	},
	Hash: func(state any) uint64 { s := state.(regState); return s.sum ^ uint64(s.n) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(modelInput), output.(modelOutput)
		if !in.rmw {
			return fmt.Sprintf("read() -> n=%d", out.seen.n)
		}
		if out.unknown {
			return fmt.Sprintf("append(%d) after reading n=%d -> ?", in.op, in.read.n)
		}
		return fmt.Sprintf("append(%d) after reading n=%d", in.op, in.read.n)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("n=%d", state.(regState).n) },
}

// operations turns the clients' logs into porcupine operations.
func (h *history) operations() []porcupine.Operation {
	var ops []porcupine.Operation
	ids := make([]int, 0, len(h.clients))
	for id := range h.clients {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		ops = append(ops, clientOps(id, h.clients[id])...)
	}
	// The register's final state, read once everything had ended.
	ops = append(ops, porcupine.Operation{ClientId: len(ids), Call: h.end, Return: h.end + 1,
		Input: modelInput{}, Output: modelOutput{seen: regState{n: h.finalN, sum: h.finalS}}})
	return ops
}

// clientOps returns the operations of one client's log: its
// read-modify-writes and its readers' reads.
func clientOps(id int, evs []event) []porcupine.Operation {
	var ops []porcupine.Operation
	var read, readOK, wrote *event
	for i := range evs {
		e := &evs[i]
		switch e.Kind {
		case "read":
			read, readOK, wrote = e, nil, nil
		case "read-ok":
			readOK = e
			if read != nil && read.Shared {
				// A reader's read stands alone: no write follows it.
				ops = append(ops, readOp(id, read, readOK))
				read, readOK = nil, nil
			}
		case "read-stale", "read-err":
			read = nil
		case "write":
			wrote = e
		case "write-ok", "write-unknown", "write-stale", "write-err":
			switch {
			case read == nil || readOK == nil:
			case e.Kind == "write-ok":
				ops = append(ops, rmwOp(id, read, readOK, e.Op, e.T))
			case e.Kind == "write-unknown":
				ops = append(ops, rmwOp(id, read, readOK, e.Op, never))
			default: // refused: only the read counts
				ops = append(ops, readOp(id, read, readOK))
			}
			read, readOK, wrote = nil, nil, nil
		}
	}
	// The log ended (the process was killed) with a request in flight.
	switch {
	case read == nil || readOK == nil:
	case wrote != nil:
		ops = append(ops, rmwOp(id, read, readOK, wrote.Op, never))
	default:
		ops = append(ops, readOp(id, read, readOK))
	}
	return ops
}

// readOp is the operation of a read answered by readOK whose state alone
// counts: a reader's, or one whose write was refused or never sent.
func readOp(id int, read, readOK *event) porcupine.Operation {
	return porcupine.Operation{ClientId: id, Call: read.T, Return: readOK.T,
		Input: modelInput{}, Output: modelOutput{seen: regState{n: readOK.N, sum: readOK.Sum}}}
}

// rmwOp is the operation of a read-modify-write whose read was answered
// by readOK and whose append of op was acknowledged at ret, or, if ret is
// never, has an unknown outcome.
func rmwOp(id int, read, readOK *event, op, ret int64) porcupine.Operation {
	rs := regState{n: readOK.N, sum: readOK.Sum}
	return porcupine.Operation{ClientId: id, Call: read.T, Return: ret,
		Input: modelInput{rmw: true, op: op, read: rs}, Output: modelOutput{unknown: ret == never}}
}

// belief is the span in which a client believed it held the lock (or a
// permit).
type belief struct {
	client   int
	token    uint64
	shared   bool // a read lock
	from, to int64
}

// beliefs returns every grant's belief span: from the grant to the first
// of Done closing, the client starting to release, and its death.
func (h *history) beliefs() []belief { return h.spans("acq-ok", "done", "rel") }

// permitBeliefs returns the belief spans of the semaphore's permits.
func (h *history) permitBeliefs() []belief { return h.spans("sem-ok", "sem-done", "sem-rel") }

// spans returns the belief spans from each grant event to the matching
// end or release event, or to the client's death.
func (h *history) spans(grant, done, rel string) []belief {
	var out []belief
	for id, evs := range h.clients {
		var cur *belief
		for _, e := range evs {
			switch e.Kind {
			case grant:
				if cur != nil {
					out = append(out, *cur)
				}
				cur = &belief{client: id, token: e.Token, shared: e.Shared, from: e.T, to: never}
			case done, rel:
				if cur != nil && cur.token == e.Token {
					cur.to = min(cur.to, e.T)
					out = append(out, *cur)
					cur = nil
				}
			}
		}
		if cur != nil {
			if k, ok := h.killed[id]; ok {
				cur.to = k
			}
			out = append(out, *cur)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].token < out[j].token })
	return out
}

// endedBy returns the time by which the server had ended grant a, at the
// latest: the first later grant that a excludes (any grant, unless both
// are read locks). Its grant is the proof: the server admits it only once
// a's record is gone. never if no such grant came.
func endedBy(a belief, bs []belief) int64 {
	end := never
	for _, b := range bs {
		if b.token > a.token && b.from >= a.from && !(a.shared && b.shared) {
			end = min(end, b.from)
		}
	}
	return end
}

// frozenExcuse says whether a freeze of client explains o, an overlap of
// its stale belief with a grant the server made once it had ended the
// client's (by ended at the latest, see endedBy), and if not, why not. A
// Locker reports a loss no later than the server could grant the lock
// again, so a client that ran at ended should have believed no longer. A
// frozen one runs none of its timers, and once thawed is late by at most
// the time it was frozen. So only a freeze that held the client at ended
// excuses it, and only up to ended plus the freeze's length: "the freeze
// itself plus the time until the server had ended the grant". Whether
// fencing stopped the client is for the callers to show, with the tokens
// its requests carried.
func (h *history) frozenExcuse(client int, ended int64, o window) (bool, string) {
	if ended >= never || o.from < ended {
		return false, fmt.Sprintf("the overlap began at %v, before any grant proved client %d's over on the server", ms(o.from), client)
	}
	if len(h.frozen[client]) == 0 {
		return false, fmt.Sprintf("client %d was not frozen", client)
	}
	var why []string
	for _, f := range h.frozen[client] {
		switch {
		case ended < f.from || f.to < ended:
			why = append(why, fmt.Sprintf("client %d was frozen from %v to %v, not when the server had ended its grant (by %v)", client, ms(f.from), ms(f.to), ms(ended)))
		case o.to-ended > f.to-f.from:
			why = append(why, fmt.Sprintf("client %d was frozen from %v to %v, but its belief lasted until %v, longer after the server had ended its grant (by %v) than the freeze lasted", client, ms(f.from), ms(f.to), ms(o.to), ms(ended)))
		default:
			return true, ""
		}
	}
	return false, strings.Join(why, "; ")
}

// refusedSince reports whether the register refused, as stale, a request
// carrying tok at or after t: the evidence that fencing stopped a stale
// holder, without which a freeze excuses nothing.
func (h *history) refusedSince(tok uint64, t int64) bool {
	if h.evidence != nil {
		return slices.ContainsFunc(h.evidence[tok], func(at int64) bool { return at >= t })
	}
	for _, e := range h.server {
		if e.Token == tok && e.Status == http.StatusConflict && e.T >= t {
			return true
		}
	}
	return false
}

// revocation is one grant revoked by the test.
type revocation struct {
	client int
	// called is when Revoke was called: the server deletes the record,
	// and may grant the lock to the next waiter, before Revoke returns.
	called int64
	// at is when Revoke returned, resumed when the holder's client ran
	// again after the freeze the revocation was made in (at, if its
	// client was not frozen).
	at, resumed int64
}

// revokedExcuse reports whether the overlap of a, the older grant, with b
// is the documented window of a revocation (see lock.Revoker): b was
// granted after Revoke of a was called, and a's client, which learns of the
// revocation only when its Locker hears of the deletion, ended its belief
// within one TTL of running again. A revoked holder that believes longer
// has missed the deletion, which is a violation.
func (h *history) revokedExcuse(a, b belief) bool {
	rv, ok := h.revoked[a.token]
	if !ok || rv.client != a.client || b.from < rv.called {
		return false
	}
	resumed := max(rv.at, rv.resumed)
	return resumed != never && a.to <= resumed+int64(h.ttl)
}

// serverExcuse says whether a documented server defect explains an
// overlap of two holders' beliefs that starts at start, and if not, why
// not. There is one such defect: etcd issues 12528 and 15247, where a
// member that was the leader when it was frozen, once resumed, acts for a
// moment on its pre-freeze view of the leases and may revoke leases that
// its successor kept alive; the holder of such a lease learns of the
// revocation only after it happened, while the next waiter is granted
// the lock at once. Nothing like it is known for ZooKeeper, or for a
// frozen etcd follower (it never decides on lease expiry).
//
// The overlap must start at or after the resume, since a frozen member
// does nothing, and no later than one TTL after it: the resumed member
// acts on its stale view only until it hears of the new term, which the
// new leader's first heartbeat (100 ms in these clusters) or its own
// check-quorum step-down (one election timeout, 1 s) tells it, both well
// inside the TTL (2 s or more); and a revocation it caused reaches the
// next waiter within a watch round trip. An overlap beginning later than
// that cannot come from state the member held before the freeze.
func (h *history) serverExcuse(start int64) (bool, string) {
	if len(h.serverFreezes) == 0 {
		return false, "no server was frozen"
	}
	var why []string
	for _, f := range h.serverFreezes {
		switch {
		case h.backend != cluster.Etcd:
			why = append(why, fmt.Sprintf("%s was frozen, but no known %s defect lets a resumed server end a lease late", f.member, h.backend))
		case !f.leader:
			why = append(why, fmt.Sprintf("%s was frozen as a follower, which etcd issues 12528 and 15247 do not cover", f.member))
		case f.to >= never:
			why = append(why, fmt.Sprintf("former leader %s was never resumed", f.member))
		case start < f.to:
			why = append(why, fmt.Sprintf("the overlap began at %v, before former leader %s was resumed at %v", ms(start), f.member, ms(f.to)))
		case start > f.to+int64(h.ttl):
			why = append(why, fmt.Sprintf("the overlap began at %v, more than one TTL (%v) after former leader %s was resumed at %v", ms(start), h.ttl, f.member, ms(f.to)))
		default:
			return true, ""
		}
	}
	return false, strings.Join(why, "; ")
}

// check runs every checker over h and returns the run's counts and the
// violations found, each a sentence saying what broke.
func (h *history) check() (stats, []string) {
	if h.multi != nil {
		return h.checkMulti()
	}
	st := h.counts()
	var bad []string
	// 1. No acknowledged append lost.
	bad = append(bad, h.checkAcked()...)
	// 2. Linearizability of the register's history.
	bad = append(bad, h.checkLinearizable()...)
	// 3. Accepted tokens never decrease, and no accepted write was based
	// on a version older than the current one (a lost update).
	bad = append(bad, h.checkTokens()...)
	// 4. Belief spans overlap only where an excuse of overlapExcuse
	// applies and fencing held.
	bad = append(bad, h.checkOverlaps(&st)...)
	// 5. No more than limit permits believed held at once, except where
	// frozen holders' own stale permits, or a server defect, account for
	// the excess.
	bad = append(bad, h.checkPermits(&st)...)
	// 6. With a lock-delay, no grant came sooner than the delay after a
	// crashed holder's record vanished.
	bad = append(bad, h.checkLockDelay(&st)...)
	// 7. Every client that kept trying was served after the last fault.
	bad = append(bad, h.checkServed()...)
	st.Violations = len(bad)
	return st, bad
}

// counts counts what the clients did. A reader's reads are no
// read-modify-writes, and are left out.
func (h *history) counts() stats {
	st := stats{Runs: 1}
	for _, evs := range h.clients {
		for _, e := range evs {
			if e.Shared && strings.HasPrefix(e.Kind, "read") {
				continue
			}
			switch e.Kind {
			case "read":
				st.Ops++
			case "acq-ok":
				st.Grants++
			case "sem-ok":
				st.Permits++
			case "write-ok":
				st.WritesOK++
			case "write-stale":
				st.WritesStale++
			case "write-unknown":
				st.WritesUnknown++
			case "write-err", "read-err":
				st.WritesFailed++
			case "read-stale":
				st.ReadsStale++
			case "done", "acq-err", "sem-done", "sem-err":
				if e.Class == "lost" {
					st.Lost++
				}
			}
		}
		// A write sent by a process that died before the answer.
		if n := len(evs); n > 0 && evs[n-1].Kind == "write" {
			st.WritesUnknown++
		}
	}
	return st
}

// checkAcked requires every acknowledged append in the final set.
func (h *history) checkAcked() []string {
	acked := map[int64]int{} // op -> client
	for id, evs := range h.clients {
		for _, e := range evs {
			if e.Kind == "write-ok" {
				acked[e.Op] = id
			}
		}
	}
	var lost []int64
	for op := range acked {
		if !h.final[op] {
			lost = append(lost, op)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	slices.Sort(lost)
	return []string{fmt.Sprintf("%d of %d acknowledged appends are missing from the final set (first: op %d by client %d)",
		len(lost), len(acked), lost[0], acked[lost[0]])}
}

// checkLinearizable requires the register's history to be linearizable.
func (h *history) checkLinearizable() []string {
	ops := h.operations()
	res, info := porcupine.CheckOperationsVerbose(setModel.ToModel(), ops, 2*time.Minute)
	switch res {
	case porcupine.Illegal:
		msg := fmt.Sprintf("the register's history of %d operations is not linearizable", len(ops))
		path := filepath.Join(os.TempDir(), fmt.Sprintf("faulttest-%s-%d.html", strings.NewReplacer("/", "-").Replace(h.name), time.Now().UnixNano()))
		if !h.fenced {
			// The control run fails by design; no need for a picture.
		} else if err := porcupine.VisualizePath(setModel.ToModel(), info, path); err == nil {
			msg += " (visualization: " + path + ")"
		}
		return []string{msg}
	case porcupine.Unknown:
		return []string{fmt.Sprintf("the linearizability check of %d operations did not finish in time", len(ops))}
	}
	return nil
}

// checkTokens requires the tokens the register accepted never to
// decrease, and no accepted write to be based on an old version.
func (h *history) checkTokens() []string {
	var bad []string
	var hi uint64
	var hiClient int
	for _, e := range h.server {
		if e.Status != http.StatusOK {
			continue
		}
		if e.Token < hi {
			bad = append(bad, fmt.Sprintf("the register accepted token %d from client %d at %v after token %d from client %d",
				e.Token, e.Client, ms(e.T), hi, hiClient))
			break
		}
		hi, hiClient = e.Token, e.Client
	}
	for _, e := range h.server {
		if e.Status == http.StatusOK && e.Write && e.Base != e.Cur {
			bad = append(bad, fmt.Sprintf("the register accepted a write by client %d (token %d, op %d) based on version %d while it was at version %d: the appends in between were overwritten",
				e.Client, e.Token, e.Op, e.Base, e.Cur))
			break
		}
	}
	return bad
}

// checkServed requires every client that kept trying to have been
// granted the lock after the last fault.
func (h *history) checkServed() []string {
	var bad []string
	for _, id := range sortedIDs(h.live) {
		served := false
		for _, e := range h.clients[id] {
			served = served || (e.Kind == "acq-ok" && e.T >= h.healed)
		}
		if !served {
			bad = append(bad, fmt.Sprintf("client %d kept trying but was not granted the lock after the fault ended at %v", id, ms(h.healed)))
		}
	}
	return bad
}

// excuse names why an overlap of two holders' beliefs is allowed.
type excuse int

const (
	excuseNone    excuse = iota
	excuseFrozen         // the older holder's client was frozen (frozenExcuse)
	excuseRevoked        // the older grant was revoked (revokedExcuse)
	excuseServer         // a documented server defect (serverExcuse)
)

// checkOverlaps checks the lock's belief spans: two overlap only where
// overlapExcuse finds an excuse, and then fencing must have rejected the
// stale holder: none of its requests accepted after the newer holder's
// first. Any other overlap means Done fired too late. The excused
// overlaps are counted apart, per pair of grants.
func (h *history) checkOverlaps(st *stats) []string {
	var bad []string
	bs := h.beliefs()
	first, last := h.acceptedTimes()
	for i, a := range bs {
		ended := endedBy(a, bs)
		for _, b := range bs[i+1:] {
			if b.token == a.token || b.from >= a.to || a.from >= b.to {
				continue
			}
			if a.shared && b.shared {
				st.SharedOverlaps++
				continue
			}
			ex, why := h.overlapExcuse(a, b, ended)
			if ex == excuseNone {
				bad = append(bad, fmt.Sprintf("client %d believed it held the lock (token %d) from %v to %v, but client %d was granted it (token %d) at %v; no excuse applies: %s",
					a.client, a.token, ms(a.from), ms(a.to), b.client, b.token, ms(b.from), why))
				continue
			}
			if f, ok := first[b.token]; ok && last[a.token] > f {
				bad = append(bad, fmt.Sprintf("client %d (token %d) had a request accepted at %v, after client %d (token %d) had one accepted at %v: the overlap was not fenced",
					a.client, a.token, ms(last[a.token]), b.client, b.token, ms(f)))
				continue
			}
			switch ex {
			case excuseFrozen:
				st.FrozenClient++
			case excuseRevoked:
				st.Revoked++
			default:
				st.Excused++
			}
		}
	}
	return bad
}

// acceptedTimes returns, by token, when the register first and last
// accepted a request carrying it.
func (h *history) acceptedTimes() (first, last map[uint64]int64) {
	first, last = map[uint64]int64{}, map[uint64]int64{}
	for _, e := range h.server {
		if e.Status != http.StatusOK {
			continue
		}
		if _, ok := first[e.Token]; !ok {
			first[e.Token] = e.T
		}
		last[e.Token] = e.T
	}
	return first, last
}

// overlapExcuse says which excuse, if any, allows the overlap of a, the
// older grant, with b, and if none does, why not; ended is when the
// server had ended a (endedBy). A freeze excuses it only with the
// evidence that fencing rejected a's client: a request with a's token
// refused since the overlap began. (A reader sends its token too, so a
// frozen writer's overlap with a reader is held to the same evidence.)
func (h *history) overlapExcuse(a, b belief, ended int64) (excuse, string) {
	o := window{from: max(a.from, b.from), to: min(a.to, b.to)}
	frozen, why := h.frozenExcuse(a.client, ended, o)
	switch {
	case frozen && h.refusedSince(a.token, o.from):
		return excuseFrozen, ""
	case frozen:
		why = fmt.Sprintf("client %d was frozen, but no request with its token %d was refused from %v on, so fencing was not seen to stop it", a.client, a.token, ms(o.from))
	}
	if h.revokedExcuse(a, b) {
		return excuseRevoked, ""
	}
	ok, swhy := h.serverExcuse(o.from)
	if ok {
		return excuseServer, ""
	}
	return excuseNone, why + "; " + swhy
}

// checkPermits checks the semaphore workload: at each permit grant, at
// most limit permit beliefs may be held, the new one included. An excess
// is excused, and counted apart, in two cases. Either the permits over
// the limit are each a frozen holder's own stale permit (permitExcuse);
// or a documented server defect explains it (serverExcuse).
func (h *history) checkPermits(st *stats) []string {
	if h.limit == 0 {
		return nil
	}
	var bad []string
	bs := h.permitBeliefs()
	locks := h.beliefs()
	// ended holds, by token, the first grant made while the permit was
	// believed held and the limit reached: the server makes such a grant
	// only once some permit held then is gone, so it is the proof that a
	// stale one had ended (see permitExcuse).
	ended := map[uint64]int64{}
	for _, b := range byGrant(bs) {
		var held []belief
		for _, a := range bs {
			if a.from <= b.from && b.from < a.to {
				held = append(held, a)
			}
		}
		st.MaxPermits = max(st.MaxPermits, len(held))
		if len(held) <= h.limit {
			continue
		}
		unexcused, why := h.unexcusedPermits(held, b, ended, locks)
		if unexcused <= h.limit {
			st.PermitsFrozen++
			continue
		}
		ok, swhy := h.serverExcuse(b.from)
		if ok {
			st.PermitsExcused++
			continue
		}
		var who []string
		for _, a := range held {
			who = append(who, fmt.Sprintf("client %d (token %d, from %v)", a.client, a.token, ms(a.from)))
		}
		bad = append(bad, fmt.Sprintf("%d permits of a semaphore of limit %d were believed held at %v: %s; %d of them are not a frozen holder's own stale permit (%s), and no known server defect explains it: %s",
			len(held), h.limit, ms(b.from), strings.Join(who, ", "), unexcused, why, swhy))
	}
	return bad
}

// byGrant returns bs in the order they were granted.
func byGrant(bs []belief) []belief {
	out := slices.Clone(bs)
	sort.SliceStable(out, func(i, j int) bool { return out[i].from < out[j].from })
	return out
}

// unexcusedPermits counts the permits held at b's grant (b's own
// included) that permitExcuse does not excuse, and says why. It first
// records b's grant in ended as the end of each held permit that has
// none yet.
func (h *history) unexcusedPermits(held []belief, b belief, ended map[uint64]int64, locks []belief) (int, string) {
	n := 0
	var why []string
	for _, a := range held {
		if _, ok := ended[a.token]; !ok && a.token != b.token {
			ended[a.token] = b.from
		}
		if a.token == b.token {
			n++
			continue
		}
		if ok, w := h.permitExcuse(a, b, ended[a.token], locks); !ok {
			n++
			why = append(why, w)
		}
	}
	return n, strings.Join(why, "; ")
}

// permitExcuse says whether a's permit, believed held at b's grant beyond
// the limit, is excused as its frozen holder's stale one, and if not, why
// not. As for the lock (frozenExcuse), a's client must have been frozen
// when the server had ended a's permit (by ended) and believed no longer
// than the freeze explains; and fencing must have rejected it: a request
// made under a lock it took while holding the permit refused since b's
// grant. (The permit has no token of its own at the register; the
// client's writes carry its lock's.)
func (h *history) permitExcuse(a, b belief, ended int64, locks []belief) (bool, string) {
	if ok, why := h.frozenExcuse(a.client, ended, window{from: b.from, to: a.to}); !ok {
		return false, why
	}
	for _, l := range locks {
		if l.client == a.client && a.from <= l.from && l.from < a.to && h.refusedSince(l.token, b.from) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("client %d was frozen, but none of its requests under a lock it took while holding permit %d was refused from %v on", a.client, a.token, ms(b.from))
}

// ms formats a time of the shared clock.
func ms(t int64) string {
	if t >= never {
		return "never"
	}
	return fmt.Sprintf("%.3fs", float64(t)/1e9)
}
