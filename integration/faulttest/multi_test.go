package faulttest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// The multi workload: each grant is a random set of 2 to 4 of multiNames,
// asked for in random order with lock.AcquireAll. Every name has a set of
// its own in the register, fenced by its own token, and the grant
// read-modify-writes each of them once with that name's lease, in the
// order asked, stopping at the first that fails (a refused token ends the
// work of the whole grant, as it would a transaction's).
const workloadMulti = "multi"

// multiNames are the multi workload's names: few, so that sets overlap.
var multiNames = []string{"m0", "m1", "m2", "m3"}

// drawSet returns a random set of 2 to 4 of the workload's names, in
// random order.
func (w *worker) drawSet() []string {
	names := w.cfg.Names
	n := 2 + w.rng.IntN(min(4, len(names))-1)
	var set []string
	for _, i := range w.rng.Perm(len(names))[:n] {
		set = append(set, names[i])
	}
	return set
}

// multiGrant takes one grant of the multi workload, does its
// read-modify-writes, holds it and releases it.
func (w *worker) multiGrant(ctx context.Context) {
	names := w.drawSet()
	w.lg.log(event{Kind: "acq", Names: names})
	actx, cancel := context.WithTimeout(ctx, w.cfg.AcquireTimeout)
	m, err := lock.AcquireAll(actx, w.locker, names...)
	cancel()
	if err != nil {
		w.lg.log(event{Kind: "acq-err", Names: names, Class: classify(err), Err: err.Error()})
		pause(ctx)
		return
	}
	held, leases := m.Names(), m.Leases()
	toks := make([]uint64, len(held))
	byName := map[string]lock.Lease{}
	for i, le := range leases {
		toks[i] = uint64(le.Token())
		byName[le.Name()] = le
	}
	w.lg.log(event{Kind: "acq-ok", Names: held, Tokens: toks})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		<-m.Done()
		err := m.Err()
		w.lg.log(event{Kind: "done", Names: held, Tokens: toks, Class: classify(err), Err: err.Error()})
	}()
	hold := w.cfg.Hold
	for _, n := range names {
		// As in grant: the last check a real program would make.
		if m.Err() != nil || ctx.Err() != nil {
			break
		}
		w.seq++
		h, ok := w.readModifyWrite(byName[n], w.cfg.OpBase+w.seq)
		hold = max(hold, h)
		if !ok {
			break
		}
	}
	select {
	case <-time.After(hold):
	case <-m.Done():
	case <-ctx.Done():
	}
	w.lg.log(event{Kind: "rel", Names: held, Tokens: toks})
	rctx, cancel := context.WithTimeout(context.Background(), w.cfg.ReleaseTimeout)
	err = m.Release(rctx)
	cancel()
	if err != nil {
		w.lg.log(event{Kind: "rel-err", Names: held, Tokens: toks, Class: classify(err), Err: err.Error()})
	} else {
		w.lg.log(event{Kind: "rel-ok", Names: held, Tokens: toks})
	}
	<-watched
}

// hasToken reports whether e carries tok: as its token, or as the token of
// one of the names of a multi grant.
func hasToken(e event, tok uint64) bool {
	return e.Token == tok || slices.Contains(e.Tokens, tok)
}

// tokenOf returns e's token of name: the token of that name in a multi
// grant (0 if it has none), e's own token otherwise.
func tokenOf(e event, name string) uint64 {
	if len(e.Names) == 0 {
		return e.Token
	}
	if i := slices.Index(e.Names, name); i >= 0 && i < len(e.Tokens) {
		return e.Tokens[i]
	}
	return 0
}

// multiHistory is what the multi checker needs besides the history: the
// names, and the final state of each name's set.
type multiHistory struct {
	names  []string
	finals map[string]finalSet
}

// finalSet is a set of the register at the end of a run.
type finalSet struct {
	elems map[int64]bool
	n     int
	sum   uint64
}

// multiFinals reads the final state of every name's set.
func (r *run) multiFinals() *multiHistory {
	mh := &multiHistory{names: multiNames, finals: map[string]finalSet{}}
	for _, n := range multiNames {
		var f finalSet
		f.elems, f.n, f.sum = r.reg.state(n)
		mh.finals[n] = f
	}
	return mh
}

// checkMulti checks a run of the multi workload. Per name, every checker
// of the mutex runs on the history of that name alone (its set's
// requests, and its grants with that name's token): linearizability,
// acknowledged appends, rising accepted tokens, and the belief overlaps
// with their excuses, where the evidence that fencing stopped a frozen
// holder may be a refusal of any of its grant's tokens (a refusal ends
// the whole grant's work). Per name too, a grant made after another had
// ended carries a higher token. Across names: every grant holds exactly
// the set asked for, each name with a token, and ends as one
// (checkAllOrNothing); and every client that kept trying was served after
// the fault.
func (h *history) checkMulti() (stats, []string) {
	st := h.counts()
	bad := h.checkAllOrNothing()
	for _, name := range h.multi.names {
		sub := h.byName(name)
		sst, sbad := sub.check()
		st.FrozenClient += sst.FrozenClient
		st.Revoked += sst.Revoked
		st.Excused += sst.Excused
		sbad = append(sbad, sub.checkTokensRise()...)
		for _, v := range sbad {
			bad = append(bad, fmt.Sprintf("name %q: %s", name, v))
		}
	}
	bad = append(bad, h.checkServed()...)
	st.Violations = len(bad)
	return st, bad
}

// project returns e as the history of name sees it, and whether it
// belongs there: a multi grant's events with name's token, name's own
// requests, and the events of no name.
func project(e event, name string) (event, bool) {
	switch {
	case len(e.Names) > 0:
		if !slices.Contains(e.Names, name) {
			return e, false
		}
		e.Token = tokenOf(e, name)
		e.Names, e.Tokens = nil, nil
		return e, true
	case e.Name != "":
		return e, e.Name == name
	}
	return e, true
}

// byName returns the history of name alone (see checkMulti). A grant's
// revocation and its refused requests count for each of its names.
func (h *history) byName(name string) *history {
	sub := *h
	sub.name, sub.multi, sub.live = h.name+"/"+name, nil, nil
	f := h.multi.finals[name]
	sub.final, sub.finalN, sub.finalS = f.elems, f.n, f.sum
	sub.clients, sub.server = map[int][]event{}, nil
	sub.revoked, sub.evidence = map[uint64]revocation{}, map[uint64][]int64{}
	refused := map[uint64][]int64{}
	for _, e := range h.server {
		if e.Status == http.StatusConflict {
			refused[e.Token] = append(refused[e.Token], e.T)
		}
		if e.Name == name {
			sub.server = append(sub.server, e)
		}
	}
	for id, evs := range h.clients {
		for _, e := range evs {
			pe, ok := project(e, name)
			if !ok {
				continue
			}
			sub.clients[id] = append(sub.clients[id], pe)
			if e.Kind != "acq-ok" {
				continue
			}
			for _, tok := range e.Tokens {
				sub.evidence[pe.Token] = append(sub.evidence[pe.Token], refused[tok]...)
				if rv, ok := h.revoked[tok]; ok {
					sub.revoked[pe.Token] = rv
				}
			}
		}
	}
	return &sub
}

// checkAllOrNothing requires every grant of the multi workload to hold
// exactly the set its client asked for, each name with a token, and its
// end and release to be of that same set: a client never believes it
// holds a strict subset of a set.
func (h *history) checkAllOrNothing() []string {
	var bad []string
	ids := make([]int, 0, len(h.clients))
	for id := range h.clients {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		var asked []string
		var held event
		for _, e := range h.clients[id] {
			switch e.Kind {
			case "acq":
				asked = slices.Sorted(slices.Values(e.Names))
			case "acq-ok":
				held = e
				if !slices.Equal(e.Names, asked) || len(e.Tokens) != len(e.Names) || slices.Contains(e.Tokens, 0) {
					bad = append(bad, fmt.Sprintf("client %d asked for %q and was granted %q with tokens %v at %v; want every name of the set, each with a token",
						id, asked, e.Names, e.Tokens, ms(e.T)))
				}
			case "done", "rel":
				if !slices.Equal(e.Names, held.Names) || !slices.Equal(e.Tokens, held.Tokens) {
					bad = append(bad, fmt.Sprintf("client %d's grant of %q (tokens %v) ended (%s at %v) as %q with tokens %v; want the whole set",
						id, held.Names, held.Tokens, e.Kind, ms(e.T), e.Names, e.Tokens))
				}
			}
		}
	}
	return bad
}

// checkTokensRise requires, of one name's grants, that one made after
// another's belief had ended carries a higher token.
func (h *history) checkTokensRise() []string {
	bs := byGrant(h.beliefs())
	for i, a := range bs {
		for _, b := range bs[i+1:] {
			if a.to <= b.from && a.token >= b.token {
				return []string{fmt.Sprintf("client %d was granted token %d at %v, after client %d's grant of token %d had ended at %v; want a higher token",
					b.client, b.token, ms(b.from), a.client, a.token, ms(a.to))}
			}
		}
	}
	return nil
}

// firstGrantAbove returns p's first grant, at or after since, of name
// with a token above tok.
func firstGrantAbove(p *clientProc, since int64, name string, tok uint64) (event, bool) {
	for _, e := range p.events() {
		if e.T >= since && e.Kind == "acq-ok" && tokenOf(e, name) > tok {
			return e, true
		}
	}
	return event{}, false
}
