package faulttest

import (
	"slices"

	"github.com/fencelock/fencelock/integration/cluster"
)

// multiGrantOf returns the events of a grant of the multi workload: client
// asks for names at t-1, is granted them with toks at t and releases them
// at end.
func multiGrantOf(client int, names []string, toks []uint64, t, end int64, body ...[]event) []event {
	evs := []event{{T: t - 1, Client: client, Kind: "acq", Names: names}, {T: t, Client: client, Kind: "acq-ok", Names: names, Tokens: toks}}
	for _, b := range body {
		evs = append(evs, b...)
	}
	return append(evs, event{T: end, Client: client, Kind: "rel", Names: names, Tokens: toks})
}

// named marks client events, or register entries, as those of name's set.
func named(name string, evs []event) []event {
	for i := range evs {
		evs[i].Name = name
	}
	return evs
}

func namedServer(name string, es ...serverEvent) []serverEvent {
	for i := range es {
		es[i].Name = name
	}
	return es
}

// multiHist returns a history of the multi workload on names a, b and c,
// whose sets end empty but for finals.
func multiHist(clients map[int][]event, srv []serverEvent, finals map[string]finalSet) history {
	mh := &multiHistory{names: []string{"a", "b", "c"}, finals: map[string]finalSet{}}
	for _, n := range mh.names {
		mh.finals[n] = finalSet{elems: map[int64]bool{}}
	}
	for n, f := range finals {
		mh.finals[n] = f
	}
	return history{backend: cluster.Etcd, ttl: unitTTL, clients: clients, server: srv, end: 40, multi: mh}
}

// multiCases check the multi workload's checker: per name, the mutex's
// checks on that name's history alone; across names, all or nothing.
func multiCases() []checkerCase {
	ab := []string{"a", "b"}
	h1, h2 := elemHash(101), elemHash(102)
	return []checkerCase{{
		name: "multi: overlapping sets in turn, a write under each name's token",
		h: multiHist(map[int][]event{
			1: multiGrantOf(1, ab, []uint64{5, 6}, 1, 10, named("a", rmw(1, 5, 2, 0, 0, 101, "write-ok")), named("b", rmw(1, 6, 5, 0, 0, 102, "write-ok"))),
			2: multiGrantOf(2, []string{"b", "c"}, []uint64{7, 8}, 11, 20),
		}, slices.Concat(namedServer("a", accepted(5, false, 2, 0, 0), accepted(5, true, 3, 0, 0)),
			namedServer("b", accepted(6, false, 5, 0, 0), accepted(6, true, 6, 0, 0))),
			map[string]finalSet{"a": {elems: map[int64]bool{101: true}, n: 1, sum: h1}, "b": {elems: map[int64]bool{102: true}, n: 1, sum: h2}}),
	}, {
		name: "control multi: granted a strict subset of the set asked for",
		h: multiHist(map[int][]event{1: {{T: 0, Client: 1, Kind: "acq", Names: ab},
			{T: 1, Client: 1, Kind: "acq-ok", Names: []string{"a"}, Tokens: []uint64{5}}}}, nil, nil),
		want: []string{`client 1 asked for ["a" "b"] and was granted ["a"]`},
	}, {
		name: "control multi: a grant that ended as a strict subset",
		h: multiHist(map[int][]event{1: append(multiGrantOf(1, ab, []uint64{5, 6}, 1, 10),
			event{T: 9, Client: 1, Kind: "done", Names: []string{"b"}, Tokens: []uint64{6}})}, nil, nil),
		want: []string{`client 1's grant of ["a" "b"] (tokens [5 6]) ended (done at 0.000s) as ["b"]`},
	}, {
		name: "control multi: two holders of one name of their sets",
		h: multiHist(map[int][]event{
			1: multiGrantOf(1, ab, []uint64{5, 6}, 1, 20),
			2: multiGrantOf(2, []string{"b", "c"}, []uint64{7, 8}, 10, 30),
		}, nil, nil),
		want: []string{`name "b": client 1 believed it held the lock (token 6)`},
	}, {
		name: "control multi: a name's token lower than its previous grant's",
		h: multiHist(map[int][]event{
			1: multiGrantOf(1, ab, []uint64{5, 6}, 1, 10),
			2: multiGrantOf(2, ab, []uint64{7, 4}, 11, 20),
		}, nil, nil),
		want: []string{`name "b": client 2 was granted token 4 at 0.000s, after client 1's grant of token 6 had ended`},
	}}
}

// multiFencingCases check the multi workload's overlap excuses: a frozen
// holder's grant is fenced as a whole, a revoked one excused as a whole.
func multiFencingCases() []checkerCase {
	ab := []string{"a", "b"}
	frozenAB := func(srv []serverEvent) history {
		h := multiHist(map[int][]event{
			1: multiGrantOf(1, ab, []uint64{5, 6}, 0, 20),
			2: multiGrantOf(2, ab, []uint64{7, 8}, 10, 30),
		}, srv, nil)
		h.frozen = map[int][]window{1: {{from: 2, to: 15}}}
		return h
	}
	return []checkerCase{{
		// Client 1, frozen, sent nothing under b's token: the refusal of
		// its a write ended the grant's work.
		name:         "multi: frozen holder fenced on one name, excused on both",
		h:            frozenAB(slices.Concat(namedServer("a", accepted(5, false, 1, 0, 0), accepted(7, false, 11, 0, 0), refused(5, 16)), namedServer("b", accepted(8, false, 12, 0, 0)))),
		frozenClient: 2,
	}, {
		name: "control multi: frozen holder, none of its grant's requests refused",
		h:    frozenAB(slices.Concat(namedServer("a", accepted(5, false, 1, 0, 0), accepted(7, false, 11, 0, 0)), namedServer("b", accepted(8, false, 12, 0, 0)))),
		want: []string{`name "a": client 1 believed it held the lock (token 5)`, `name "b": client 1 believed it held the lock (token 6)`},
	}, {
		name: "control multi: frozen holder's stale write accepted on the other name",
		h: frozenAB(slices.Concat(namedServer("a", accepted(5, false, 1, 0, 0), accepted(7, false, 11, 0, 0), refused(5, 16)),
			namedServer("b", accepted(8, false, 12, 0, 0), accepted(6, false, 17, 0, 0)))),
		want: []string{`name "b": client 1 (token 6) had a request accepted at 0.000s, after client 2 (token 8)`},
	}, {
		name: "multi: revoked grant, its other name's overlap excused too",
		h: func() history {
			h := multiHist(map[int][]event{
				1: multiGrantOf(1, ab, []uint64{5, 6}, 0, 14),
				2: multiGrantOf(2, ab, []uint64{7, 8}, 10, 30),
			}, nil, nil)
			h.frozen = map[int][]window{1: {{from: 2, to: 9}}}
			h.revoked = map[uint64]revocation{5: {client: 1, called: 7, at: 8, resumed: 9}}
			return h
		}(),
		revoked: 2,
	}}
}
