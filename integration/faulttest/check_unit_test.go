package faulttest

import (
	"net/http"
	"strings"
	"testing"
)

// rmw returns the client events of one read-modify-write: read at t
// (seeing n elements with hash sum), write of op answered with outcome
// ("write-ok", "write-stale", "write-unknown") at t+2.
func rmw(client int, tok uint64, t int64, n int, sum uint64, op int64, outcome string) []event {
	return []event{
		{T: t, Client: client, Kind: "read", Token: tok, Op: op},
		{T: t + 1, Client: client, Kind: "read-ok", Token: tok, Op: op, N: n, Sum: sum},
		{T: t + 1, Client: client, Kind: "write", Token: tok, Op: op, N: n, Sum: sum},
		{T: t + 2, Client: client, Kind: outcome, Token: tok, Op: op},
	}
}

// grant returns the events of a lease of client from t to end.
func grant(client int, tok uint64, t, end int64, body ...[]event) []event {
	evs := []event{{T: t, Client: client, Kind: "acq-ok", Token: tok}}
	for _, b := range body {
		evs = append(evs, b...)
	}
	return append(evs, event{T: end, Client: client, Kind: "rel", Token: tok})
}

// TestFaultCheckers feeds the checkers hand-made histories, so that a
// checker that passes everything cannot go unnoticed.
func TestFaultCheckers(t *testing.T) {
	h1, h2 := elemHash(101), elemHash(201)
	accepted := func(tok uint64, write bool, t int64, base, cur int) serverEvent {
		return serverEvent{T: t, Token: tok, Write: write, Status: http.StatusOK, Base: base, Cur: cur}
	}
	tests := []struct {
		name string
		h    history
		want []string // substrings of the violations expected; none if empty
	}{{
		name: "two appends in turn",
		h: history{
			clients: map[int][]event{
				1: grant(1, 5, 0, 10, rmw(1, 5, 1, 0, 0, 101, "write-ok")),
				2: grant(2, 6, 11, 20, rmw(2, 6, 12, 1, h1, 201, "write-ok")),
			},
			server: []serverEvent{accepted(5, false, 1, 0, 0), accepted(5, true, 2, 0, 0), accepted(6, false, 12, 0, 0), accepted(6, true, 13, 1, 1)},
			final:  map[int64]bool{101: true, 201: true}, finalN: 2, finalS: h1 + h2, end: 30,
		},
	}, {
		name: "lost update",
		h: history{
			clients: map[int][]event{
				1: grant(1, 5, 0, 10, rmw(1, 5, 1, 0, 0, 101, "write-ok")),
				2: grant(2, 6, 11, 20, rmw(2, 6, 12, 0, 0, 201, "write-ok")),
			},
			server: []serverEvent{accepted(5, true, 2, 0, 0), accepted(6, true, 13, 0, 1)},
			final:  map[int64]bool{201: true}, finalN: 1, finalS: h2, end: 30,
		},
		want: []string{"missing from the final set", "not linearizable", "based on version 0 while it was at version 1"},
	}, {
		name: "unknown write that was applied",
		h: history{
			clients: map[int][]event{
				1: grant(1, 5, 0, 10, rmw(1, 5, 1, 0, 0, 101, "write-unknown")),
				2: grant(2, 6, 11, 20, rmw(2, 6, 12, 1, h1, 201, "write-ok")),
			},
			final: map[int64]bool{101: true, 201: true}, finalN: 2, finalS: h1 + h2, end: 30,
		},
	}, {
		name: "unknown write that was not applied",
		h: history{
			clients: map[int][]event{
				1: grant(1, 5, 0, 10, rmw(1, 5, 1, 0, 0, 101, "write-unknown")),
				2: grant(2, 6, 11, 20, rmw(2, 6, 12, 0, 0, 201, "write-ok")),
			},
			final: map[int64]bool{201: true}, finalN: 1, finalS: h2, end: 30,
		},
	}, {
		name: "token accepted after a higher one",
		h: history{
			clients: map[int][]event{},
			server:  []serverEvent{accepted(6, false, 1, 0, 0), accepted(5, false, 2, 0, 0)},
			end:     30,
		},
		want: []string{"accepted token 5"},
	}, {
		name: "beliefs overlap, holder never frozen",
		h: history{
			clients: map[int][]event{1: grant(1, 5, 0, 20), 2: grant(2, 6, 10, 30)},
			end:     40,
		},
		want: []string{"nor a server was frozen"},
	}, {
		name: "beliefs overlap, a server frozen and the stale holder fenced",
		h: history{
			clients:      map[int][]event{1: grant(1, 5, 0, 20), 2: grant(2, 6, 10, 30)},
			serverFrozen: []window{{from: 2, to: 15}},
			server:       []serverEvent{accepted(5, false, 1, 0, 0), accepted(6, false, 11, 0, 0)},
			end:          40,
		},
	}, {
		name: "beliefs overlap, a server frozen, stale request accepted after the newer holder's",
		h: history{
			clients:      map[int][]event{1: grant(1, 5, 0, 20), 2: grant(2, 6, 10, 30)},
			serverFrozen: []window{{from: 2, to: 15}},
			server:       []serverEvent{accepted(6, false, 11, 0, 0), accepted(5, false, 16, 0, 0)},
			end:          40,
		},
		want: []string{"accepted token 5", "had a request accepted at"},
	}, {
		name: "beliefs overlap, holder frozen and fenced",
		h: history{
			clients: map[int][]event{1: grant(1, 5, 0, 20), 2: grant(2, 6, 10, 30)},
			frozen:  map[int][]window{1: {{from: 2, to: 15}}},
			server:  []serverEvent{accepted(5, false, 1, 0, 0), accepted(6, false, 11, 0, 0)},
			end:     40,
		},
	}, {
		name: "beliefs overlap, frozen holder's request accepted after the newer holder's",
		h: history{
			clients: map[int][]event{1: grant(1, 5, 0, 20), 2: grant(2, 6, 10, 30)},
			frozen:  map[int][]window{1: {{from: 2, to: 15}}},
			server:  []serverEvent{accepted(6, false, 11, 0, 0), accepted(5, false, 16, 0, 0)},
			end:     40,
		},
		want: []string{"accepted token 5", "had a request accepted at"},
	}, {
		name: "client never served after the fault",
		h: history{
			clients: map[int][]event{1: grant(1, 5, 0, 10), 2: grant(2, 6, 11, 20)},
			live:    map[int]bool{1: true, 2: true},
			healed:  5,
			end:     30,
		},
		want: []string{"client 1 kept trying"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.h.name = "unit"
			tt.h.fenced = false // no visualization files
			_, bad := tt.h.check()
			if len(tt.want) == 0 && len(bad) > 0 {
				t.Fatalf("check() = %q; want no violation", bad)
			}
			all := strings.Join(bad, "\n")
			for _, w := range tt.want {
				if !strings.Contains(all, w) {
					t.Errorf("check() = %q; want a violation containing %q", bad, w)
				}
			}
		})
	}
}
