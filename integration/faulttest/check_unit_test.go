package faulttest

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/integration/cluster"
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

// readGrant returns the events of a read lock of client from t to end.
func readGrant(client int, tok uint64, t, end int64) []event {
	return []event{{T: t, Client: client, Kind: "acq-ok", Token: tok, Shared: true}, {T: end, Client: client, Kind: "rel", Token: tok}}
}

// permit returns the events of a semaphore permit of client from t to
// end.
func permit(client int, tok uint64, t, end int64) []event {
	return []event{{T: t, Client: client, Kind: "sem-ok", Token: tok}, {T: end, Client: client, Kind: "sem-rel", Token: tok}}
}

// overlapping returns two clients whose beliefs overlap from 10 to 20:
// client 1 holds token 5 from 0 to 20, client 2 token 6 from 10 to 30.
func overlapping() map[int][]event {
	return map[int][]event{1: grant(1, 5, 0, 20), 2: grant(2, 6, 10, 30)}
}

// TestFaultCheckers feeds the checkers hand-made histories, so that a
// checker that passes everything cannot go unnoticed: each checker has a
// control history that must fail it, and each boundary of the overlap
// excuses has a case on either side.
func TestFaultCheckers(t *testing.T) {
	h1, h2 := elemHash(101), elemHash(201)
	accepted := func(tok uint64, write bool, t int64, base, cur int) serverEvent {
		return serverEvent{T: t, Token: tok, Write: write, Status: http.StatusOK, Base: base, Cur: cur}
	}
	// fenced: each holder's read accepted, the older one's before the
	// newer one's first. stale: the older holder's read accepted after
	// the newer holder's.
	fenced := []serverEvent{accepted(5, false, 1, 0, 0), accepted(6, false, 11, 0, 0)}
	stale := []serverEvent{accepted(6, false, 11, 0, 0), accepted(5, false, 16, 0, 0)}
	// The overlap starts at 10; these freezes resume before, at, or
	// after it.
	leaderResumedAt8 := []serverFreeze{{member: "etcd-1", leader: true, from: 2, to: 8}}
	leaderResumedAt10 := []serverFreeze{{member: "etcd-1", leader: true, from: 2, to: 10}}
	leaderResumedAt12 := []serverFreeze{{member: "etcd-1", leader: true, from: 2, to: 12}}
	followerResumedAt8 := []serverFreeze{{member: "etcd-2", leader: false, from: 2, to: 8}}
	const ttl = 5 // the excuse reaches from the resume to 5 ns after it
	// crashed: client 1 (token 5) granted at 0 and killed at 5; its
	// record was listed last at 8 and found gone at 10. Client 2 (token
	// 6) is granted at t.
	const lockDelay = 20
	crashed := func(t int64) map[int][]event {
		return map[int][]event{1: {{T: 0, Client: 1, Kind: "acq-ok", Token: 5}}, 2: grant(2, 6, t, t+5)}
	}
	gone := []vanish{{client: 1, token: 5, lastSeen: 8, goneAt: 10}}
	tests := []struct {
		name string
		h    history
		want []string // substrings of the violations expected; none if empty
		// the overlaps counted apart, when no violation is expected
		frozenClient, excused, permitsFrozen, revoked int
		delayed                                       int // grants checked against the lock-delay
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
		name: "control: lost append",
		h: history{
			clients: map[int][]event{
				1: grant(1, 5, 0, 10, rmw(1, 5, 1, 0, 0, 101, "write-ok")),
				2: grant(2, 6, 11, 20, rmw(2, 6, 12, 1, h1, 201, "write-ok")),
			},
			server: []serverEvent{accepted(5, true, 2, 0, 0), accepted(6, true, 13, 1, 1)},
			// 201's acknowledged append is gone, yet the register's
			// size and hash say otherwise: only the set is wrong.
			final: map[int64]bool{101: true}, finalN: 2, finalS: h1 + h2, end: 30,
		},
		want: []string{"1 of 2 acknowledged appends are missing from the final set (first: op 201 by client 2)"},
	}, {
		name: "control: not linearizable",
		h: history{
			clients: map[int][]event{
				1: grant(1, 5, 0, 10, rmw(1, 5, 1, 0, 0, 101, "write-ok")),
				// Reads the empty set after 101 was acknowledged.
				2: grant(2, 6, 11, 20, rmw(2, 6, 12, 0, 0, 201, "write-stale")),
			},
			server: []serverEvent{accepted(5, false, 1, 0, 0), accepted(5, true, 2, 0, 0), accepted(6, false, 12, 0, 0)},
			final:  map[int64]bool{101: true}, finalN: 1, finalS: h1, end: 30,
		},
		want: []string{"is not linearizable"},
	}, {
		name: "control: lost update",
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
		name: "control: token accepted after a higher one",
		h: history{
			clients: map[int][]event{},
			server:  []serverEvent{accepted(6, false, 1, 0, 0), accepted(5, false, 2, 0, 0)},
			end:     30,
		},
		want: []string{"accepted token 5"},
	}, {
		name: "control: beliefs overlap, nothing frozen",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), server: fenced, end: 40},
		want: []string{"no known server defect explains it: no server was frozen"},
	}, {
		name: "zookeeper, frozen leader, overlap after the resume, fenced",
		h:    history{backend: cluster.ZooKeeper, ttl: ttl, clients: overlapping(), serverFreezes: leaderResumedAt8, server: fenced, end: 40},
		want: []string{"no known zookeeper defect"},
	}, {
		name: "zookeeper, frozen follower, fenced",
		h:    history{backend: cluster.ZooKeeper, ttl: ttl, clients: overlapping(), serverFreezes: []serverFreeze{{member: "zk-2", from: 2, to: 8}}, server: fenced, end: 40},
		want: []string{"no known zookeeper defect"},
	}, {
		name: "etcd, frozen follower, overlap after the resume, fenced",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), serverFreezes: followerResumedAt8, server: fenced, end: 40},
		want: []string{"etcd-2 was frozen as a follower"},
	}, {
		name: "etcd, frozen leader, overlap starting before the resume",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), serverFreezes: leaderResumedAt12, server: fenced, end: 40},
		want: []string{"began at 0.000s, before former leader etcd-1 was resumed"},
	}, {
		name: "etcd, frozen leader never resumed",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), serverFreezes: []serverFreeze{{member: "etcd-1", leader: true, from: 2, to: never}}, server: fenced, end: 40},
		want: []string{"never resumed"},
	}, {
		name: "etcd, frozen leader, overlap starting more than a TTL after the resume",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), serverFreezes: []serverFreeze{{member: "etcd-1", leader: true, from: 1, to: 4}}, server: fenced, end: 40},
		want: []string{"more than one TTL"},
	}, {
		name:    "etcd, frozen leader, overlap starting at the resume, fenced",
		h:       history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), serverFreezes: leaderResumedAt10, server: fenced, end: 40},
		excused: 1,
	}, {
		name:    "etcd, frozen leader, overlap starting after the resume, fenced",
		h:       history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), serverFreezes: leaderResumedAt8, server: fenced, end: 40},
		excused: 1,
	}, {
		name:    "etcd, frozen follower then frozen leader, overlap after the leader's resume, fenced",
		h:       history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), serverFreezes: append(append([]serverFreeze(nil), followerResumedAt8...), leaderResumedAt8...), server: fenced, end: 40},
		excused: 1,
	}, {
		name: "etcd, frozen leader, overlap after the resume, stale request accepted after the newer holder's",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), serverFreezes: leaderResumedAt8, server: stale, end: 40},
		want: []string{"accepted token 5", "the overlap was not fenced"},
	}, {
		name:         "holder's client frozen during the overlap, fenced",
		h:            history{backend: cluster.ZooKeeper, ttl: ttl, clients: overlapping(), frozen: map[int][]window{1: {{from: 2, to: 15}}}, server: fenced, end: 40},
		frozenClient: 1,
	}, {
		// Client 1 (token 5) frozen 2-9 and revoked at 8; client 2
		// granted at 10; the TTL reaches from the thaw at 9 to 14.
		name:    "revoked holder told within a TTL of its thaw, fenced",
		h:       history{backend: cluster.Etcd, ttl: ttl, clients: map[int][]event{1: grant(1, 5, 0, 14), 2: grant(2, 6, 10, 30)}, frozen: map[int][]window{1: {{from: 2, to: 9}}}, revoked: map[uint64]revocation{5: {client: 1, at: 8, resumed: 9}}, server: fenced, end: 40},
		revoked: 1,
	}, {
		name: "control: revoked holder told more than a TTL after its thaw",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: map[int][]event{1: grant(1, 5, 0, 15), 2: grant(2, 6, 10, 30)}, frozen: map[int][]window{1: {{from: 2, to: 9}}}, revoked: map[uint64]revocation{5: {client: 1, at: 8, resumed: 9}}, server: fenced, end: 40},
		want: []string{"client 1 believed it held the lock (token 5)", "was not frozen during the overlap"},
	}, {
		name: "control: holder revoked after the newer grant",
		h:    history{backend: cluster.ZooKeeper, ttl: ttl, clients: map[int][]event{1: grant(1, 5, 0, 14), 2: grant(2, 6, 10, 30)}, revoked: map[uint64]revocation{5: {client: 1, at: 11, resumed: 11}}, server: fenced, end: 40},
		want: []string{"client 1 believed it held the lock (token 5)"},
	}, {
		name: "control: another client's grant revoked",
		h:    history{backend: cluster.ZooKeeper, ttl: ttl, clients: map[int][]event{1: grant(1, 5, 0, 14), 2: grant(2, 6, 10, 30)}, revoked: map[uint64]revocation{5: {client: 3, at: 8, resumed: 8}}, server: fenced, end: 40},
		want: []string{"client 1 believed it held the lock (token 5)"},
	}, {
		name: "revoked holder, stale request accepted after the newer holder's",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: map[int][]event{1: grant(1, 5, 0, 14), 2: grant(2, 6, 10, 30)}, revoked: map[uint64]revocation{5: {client: 1, at: 8, resumed: 9}}, server: stale, end: 40},
		want: []string{"accepted token 5", "the overlap was not fenced"},
	}, {
		name: "holder's client frozen during the overlap, stale request accepted after the newer holder's",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), frozen: map[int][]window{1: {{from: 2, to: 15}}}, server: stale, end: 40},
		want: []string{"accepted token 5", "the overlap was not fenced"},
	}, {
		name: "holder's client frozen only before the overlap",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), frozen: map[int][]window{1: {{from: 2, to: 8}}}, server: fenced, end: 40},
		want: []string{"client 1 was not frozen during the overlap"},
	}, {
		name: "newer holder's client frozen, not the older one's",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: overlapping(), frozen: map[int][]window{2: {{from: 12, to: 15}}}, server: fenced, end: 40},
		want: []string{"client 1 was not frozen during the overlap"},
	}, {
		name: "readers overlap",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: map[int][]event{1: readGrant(1, 5, 0, 20), 2: readGrant(2, 6, 10, 30)}, end: 40},
	}, {
		name: "control: a writer overlaps a reader",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: map[int][]event{1: readGrant(1, 5, 0, 20), 2: grant(2, 6, 10, 30)}, end: 40},
		want: []string{"client 1 believed it held the lock (token 5) from 0.000s to 0.000s, but client 2 was granted it (token 6)"},
	}, {
		name: "control: a reader overlaps a writer",
		h:    history{backend: cluster.ZooKeeper, ttl: ttl, clients: map[int][]event{1: grant(1, 5, 0, 20), 2: readGrant(2, 6, 10, 30)}, end: 40},
		want: []string{"client 2 was granted it (token 6)"},
	}, {
		name:         "a reader overlaps a frozen writer, fenced",
		h:            history{backend: cluster.ZooKeeper, ttl: ttl, clients: map[int][]event{1: grant(1, 5, 0, 20), 2: readGrant(2, 6, 10, 30)}, frozen: map[int][]window{1: {{from: 2, to: 15}}}, end: 40},
		frozenClient: 1,
	}, {
		name: "permits within the limit",
		h:    history{backend: cluster.Etcd, ttl: ttl, limit: 2, clients: map[int][]event{1: permit(1, 5, 0, 20), 2: permit(2, 6, 10, 30), 3: permit(3, 7, 20, 40)}, end: 50},
	}, {
		name: "control: one permit over the limit",
		h:    history{backend: cluster.Etcd, ttl: ttl, limit: 2, clients: map[int][]event{1: permit(1, 5, 0, 20), 2: permit(2, 6, 10, 30), 3: permit(3, 7, 15, 40)}, end: 50},
		want: []string{"3 permits of a semaphore of limit 2 were believed held at 0.000s", "no server was frozen"},
	}, {
		name:          "one permit over the limit, an older holder frozen",
		h:             history{backend: cluster.ZooKeeper, ttl: ttl, limit: 2, clients: map[int][]event{1: permit(1, 5, 0, 20), 2: permit(2, 6, 10, 30), 3: permit(3, 7, 15, 40)}, frozen: map[int][]window{1: {{from: 12, to: 18}}}, end: 50},
		permitsFrozen: 1,
	}, {
		name: "control: one permit over the limit, only the newest holder frozen",
		h:    history{backend: cluster.ZooKeeper, ttl: ttl, limit: 2, clients: map[int][]event{1: permit(1, 5, 0, 20), 2: permit(2, 6, 10, 30), 3: permit(3, 7, 15, 40)}, frozen: map[int][]window{3: {{from: 16, to: 18}}}, end: 50},
		want: []string{"3 permits of a semaphore of limit 2", "no holder was frozen then"},
	}, {
		name:    "grant the lock-delay after the last listing that showed the crashed holder's record",
		h:       history{backend: cluster.Etcd, ttl: ttl, clients: crashed(8 + lockDelay), killed: map[int]int64{1: 5}, lockDelay: lockDelay, vanished: gone, end: 50},
		delayed: 1,
	}, {
		name: "control: grant sooner than the lock-delay after the last listing that showed the record",
		h:    history{backend: cluster.ZooKeeper, ttl: ttl, clients: crashed(8 + lockDelay - 1), killed: map[int]int64{1: 5}, lockDelay: lockDelay, vanished: gone, end: 50},
		want: []string{"client 2 was granted the lock (token 6) at 0.000s, 19ns after the last listing that still showed crashed client 1's record (token 5); want at least the lock-delay 20ns"},
	}, {
		name: "control: no grant after the crashed holder",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: map[int][]event{1: {{T: 0, Client: 1, Kind: "acq-ok", Token: 5}}}, killed: map[int]int64{1: 5}, lockDelay: lockDelay, vanished: gone, end: 50},
		want: []string{"no grant followed client 1's (token 5) record"},
	}, {
		name: "no lock-delay required: an early grant is not checked",
		h:    history{backend: cluster.Etcd, ttl: ttl, clients: crashed(11), killed: map[int]int64{1: 5}, vanished: gone, end: 50},
	}, {
		name: "control: client never served after the fault",
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
			st, bad := tt.h.check()
			if len(tt.want) == 0 && len(bad) > 0 {
				t.Fatalf("check() = %q; want no violation", bad)
			}
			all := strings.Join(bad, "\n")
			for _, w := range tt.want {
				if !strings.Contains(all, w) {
					t.Errorf("check() = %q; want a violation containing %q", bad, w)
				}
			}
			if len(tt.want) > 0 {
				return
			}
			if st.DelayedGrants != tt.delayed {
				t.Errorf("check() checked %d grants against the lock-delay; want %d", st.DelayedGrants, tt.delayed)
			}
			if st.FrozenClient != tt.frozenClient || st.Excused != tt.excused || st.PermitsFrozen != tt.permitsFrozen || st.Revoked != tt.revoked {
				t.Errorf("check() counted %d frozen-client, %d excused and %d revoked-holder overlaps, %d frozen-holder permit excesses; want %d, %d, %d and %d",
					st.FrozenClient, st.Excused, st.Revoked, st.PermitsFrozen, tt.frozenClient, tt.excused, tt.revoked, tt.permitsFrozen)
			}
		})
	}
}
