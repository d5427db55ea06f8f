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
)

// never stands for "no end": the return time of an operation whose outcome
// is unknown, the end of a belief that never ended.
const never = int64(math.MaxInt64 / 2)

// window is a span of the shared clock.
type window struct{ from, to int64 }

// history is everything a run recorded, as the checkers need it.
type history struct {
	name    string
	clients map[int][]event // by client id
	server  []serverEvent
	final   map[int64]bool // the register's set at the end
	finalN  int
	finalS  uint64
	end     int64            // when the history ended
	frozen  map[int][]window // when each client was frozen (SIGSTOP)
	// when a server was frozen; a leader frozen and resumed may revoke
	// leases its successor kept alive (etcd issues 12528 and 15247), so
	// the client's belief can outlast its lease through no fault of the
	// client
	serverFrozen []window
	killed       map[int]int64 // when clients were killed
	healed       int64         // when the last fault ended
	live         map[int]bool  // clients that kept trying to the end
	fenced       bool
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
	Overlaps      int // belief overlaps explained by a frozen holder or server, and fenced
	Violations    int
	Elapsed       time.Duration
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
	s.Overlaps += o.Overlaps
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
		var read, readOK *event
		var wrote *event
		for i := range h.clients[id] {
			e := &h.clients[id][i]
			switch e.Kind {
			case "read":
				read, readOK, wrote = e, nil, nil
			case "read-ok":
				readOK = e
			case "read-stale", "read-err":
				read = nil
			case "write":
				wrote = e
			case "write-ok", "write-unknown", "write-stale", "write-err":
				if read == nil || readOK == nil {
					continue
				}
				rs := regState{n: readOK.N, sum: readOK.Sum}
				switch e.Kind {
				case "write-ok":
					ops = append(ops, porcupine.Operation{ClientId: id, Call: read.T, Return: e.T,
						Input: modelInput{rmw: true, op: e.Op, read: rs}, Output: modelOutput{}})
				case "write-unknown":
					ops = append(ops, porcupine.Operation{ClientId: id, Call: read.T, Return: never,
						Input: modelInput{rmw: true, op: e.Op, read: rs}, Output: modelOutput{unknown: true}})
				default:
					ops = append(ops, porcupine.Operation{ClientId: id, Call: read.T, Return: readOK.T,
						Input: modelInput{}, Output: modelOutput{seen: rs}})
				}
				read, readOK, wrote = nil, nil, nil
			}
		}
		// The log ended (the process was killed) with a request in flight.
		if read != nil && readOK != nil {
			rs := regState{n: readOK.N, sum: readOK.Sum}
			if wrote != nil {
				ops = append(ops, porcupine.Operation{ClientId: id, Call: read.T, Return: never,
					Input: modelInput{rmw: true, op: wrote.Op, read: rs}, Output: modelOutput{unknown: true}})
			} else {
				ops = append(ops, porcupine.Operation{ClientId: id, Call: read.T, Return: readOK.T,
					Input: modelInput{}, Output: modelOutput{seen: rs}})
			}
		}
	}
	// The register's final state, read once everything had ended.
	ops = append(ops, porcupine.Operation{ClientId: len(ids), Call: h.end, Return: h.end + 1,
		Input: modelInput{}, Output: modelOutput{seen: regState{n: h.finalN, sum: h.finalS}}})
	return ops
}

// belief is the span in which a client believed it held the lock.
type belief struct {
	client   int
	token    uint64
	from, to int64
}

// beliefs returns every grant's belief span: from the grant to the first
// of Done closing, the client starting to release, and its death.
func (h *history) beliefs() []belief {
	var out []belief
	for id, evs := range h.clients {
		var cur *belief
		for _, e := range evs {
			switch e.Kind {
			case "acq-ok":
				if cur != nil {
					out = append(out, *cur)
				}
				cur = &belief{client: id, token: e.Token, from: e.T, to: never}
			case "done", "rel":
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

// frozenDuring reports whether client was frozen at some time in w.
func (h *history) frozenDuring(client int, w window) bool {
	for _, f := range h.frozen[client] {
		if f.from < w.to && w.from < f.to {
			return true
		}
	}
	return false
}

// serverFrozenDuring reports whether a server was frozen at some time in w.
func (h *history) serverFrozenDuring(w window) bool {
	for _, f := range h.serverFrozen {
		if f.from < w.to && w.from < f.to {
			return true
		}
	}
	return false
}

// check runs every checker over h and returns the run's counts and the
// violations found, each a sentence saying what broke.
func (h *history) check() (stats, []string) {
	var st stats
	var bad []string
	st.Runs = 1

	// Counts.
	acked := map[int64]int{} // op -> client, for acknowledged appends
	for id, evs := range h.clients {
		for _, e := range evs {
			switch e.Kind {
			case "read":
				st.Ops++
			case "acq-ok":
				st.Grants++
			case "write-ok":
				st.WritesOK++
				acked[e.Op] = id
			case "write-stale":
				st.WritesStale++
			case "write-unknown":
				st.WritesUnknown++
			case "write-err", "read-err":
				st.WritesFailed++
			case "read-stale":
				st.ReadsStale++
			case "done", "acq-err":
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

	// 1. No acknowledged append lost.
	var lost []int64
	for op := range acked {
		if !h.final[op] {
			lost = append(lost, op)
		}
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		bad = append(bad, fmt.Sprintf("%d of %d acknowledged appends are missing from the final set (first: op %d by client %d)",
			len(lost), len(acked), lost[0], acked[lost[0]]))
	}

	// 2. Linearizability of the register's history.
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
		bad = append(bad, msg)
	case porcupine.Unknown:
		bad = append(bad, fmt.Sprintf("the linearizability check of %d operations did not finish in time", len(ops)))
	}

	// 3. Accepted tokens never decrease, and no accepted write was based
	// on a version older than the current one (a lost update).
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

	// 4. Belief spans overlap only where the older holder or a server was
	// frozen, and then none of the older holder's requests was accepted
	// after the newer holder's first: fencing rejected the stale one. An
	// overlap with nothing frozen means Done fired too late.
	bs := h.beliefs()
	firstAccepted := map[uint64]int64{}
	lastAccepted := map[uint64]int64{}
	for _, e := range h.server {
		if e.Status != http.StatusOK {
			continue
		}
		if _, ok := firstAccepted[e.Token]; !ok {
			firstAccepted[e.Token] = e.T
		}
		lastAccepted[e.Token] = e.T
	}
	for i, a := range bs {
		for _, b := range bs[i+1:] {
			if b.token == a.token || b.from >= a.to || a.from >= b.to {
				continue
			}
			if w := (window{a.from, a.to}); h.frozenDuring(a.client, w) || h.serverFrozenDuring(w) {
				st.Overlaps++
				if f, ok := firstAccepted[b.token]; ok && lastAccepted[a.token] > f {
					bad = append(bad, fmt.Sprintf("client %d (token %d) had a request accepted at %v, after client %d (token %d) had one accepted at %v",
						a.client, a.token, ms(lastAccepted[a.token]), b.client, b.token, ms(f)))
				}
				continue
			}
			bad = append(bad, fmt.Sprintf("client %d believed it held the lock (token %d) from %v to %v, but client %d was granted it (token %d) at %v, and neither client %d nor a server was frozen",
				a.client, a.token, ms(a.from), ms(a.to), b.client, b.token, ms(b.from), a.client))
		}
	}

	// 5. Every client that kept trying was served after the last fault.
	for id := range h.live {
		served := false
		for _, e := range h.clients[id] {
			if e.Kind == "acq-ok" && e.T >= h.healed {
				served = true
				break
			}
		}
		if !served {
			bad = append(bad, fmt.Sprintf("client %d kept trying but was not granted the lock after the fault ended at %v", id, ms(h.healed)))
		}
	}

	st.Violations = len(bad)
	return st, bad
}

// ms formats a time of the shared clock.
func ms(t int64) string {
	if t >= never {
		return "never"
	}
	return fmt.Sprintf("%.3fs", float64(t)/1e9)
}
