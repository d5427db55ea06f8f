package faulttest

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing/httpfence"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/lock/locktest"
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

// sharedRead returns the client events of a reader's read at t, seeing n
// elements with hash sum.
func sharedRead(client int, tok uint64, t int64, n int, sum uint64) []event {
	return []event{
		{T: t, Client: client, Kind: "read", Token: tok, Shared: true},
		{T: t + 1, Client: client, Kind: "read-ok", Token: tok, N: n, Sum: sum, Shared: true},
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
func readGrant(client int, tok uint64, t, end int64, body ...[]event) []event {
	evs := grant(client, tok, t, end, body...)
	evs[0].Shared = true
	return evs
}

// permit returns the events of a semaphore permit of client from t to
// end.
func permit(client int, tok uint64, t, end int64) []event {
	return []event{{T: t, Client: client, Kind: "sem-ok", Token: tok}, {T: end, Client: client, Kind: "sem-rel", Token: tok}}
}

// accepted returns the register's log entry of an accepted request
// carrying tok at t; a write was based on version base and applied at
// version cur.
func accepted(tok uint64, write bool, t int64, base, cur int) serverEvent {
	return serverEvent{T: t, Token: tok, Write: write, Status: http.StatusOK, Base: base, Cur: cur}
}

// refused returns the register's log entry of a write carrying tok
// refused as stale at t.
func refused(tok uint64, t int64) serverEvent {
	return serverEvent{T: t, Token: tok, Write: true, Status: http.StatusConflict}
}

// overlapping returns two clients whose beliefs overlap from 10 to 20:
// client 1 holds token 5 from 0 to 20, client 2 token 6 from 10 to 30.
func overlapping() map[int][]event {
	return map[int][]event{1: grant(1, 5, 0, 20), 2: grant(2, 6, 10, 30)}
}

// Register logs for the overlapping() history. fencedLog: each holder's
// read accepted, the older one's before the newer one's first. staleLog:
// the older holder's read accepted after the newer holder's.
// frozenFencedLog: fencedLog, then the older holder's write, sent once it
// was thawed, refused as stale.
func fencedLog() []serverEvent {
	return []serverEvent{accepted(5, false, 1, 0, 0), accepted(6, false, 11, 0, 0)}
}

func staleLog() []serverEvent {
	return []serverEvent{accepted(6, false, 11, 0, 0), accepted(5, false, 16, 0, 0)}
}

func frozenFencedLog() []serverEvent { return append(fencedLog(), refused(5, 16)) }

// unitTTL is the TTL of the hand-made histories: the server excuse
// reaches from the resume to 5ns after it.
const unitTTL = 5

// checkerCase is a hand-made history and what the checkers must find in
// it.
type checkerCase struct {
	name string
	h    history
	want []string // substrings of the violations expected; none if empty
	// the overlaps counted apart, when no violation is expected
	frozenClient, excused, permitsFrozen, revoked int
	delayed                                       int // grants checked against the lock-delay
}

// TestFaultCheckers feeds the checkers hand-made histories, so that a
// checker that passes everything cannot go unnoticed: each checker has a
// control history that must fail it, and each boundary of the overlap
// excuses has a case on either side.
func TestFaultCheckers(t *testing.T) {
	groups := [][]checkerCase{registerCases(), serverExcuseCases(), frozenClientCases(), frozenFencingCases(),
		revokedCases(), readerCases(), permitCases(), frozenPermitCases(), lockDelayCases(), multiCases(), multiFencingCases()}
	for _, tt := range slices.Concat(groups...) {
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

// registerCases check the register's own history: appends kept,
// linearizability, tokens, and service after the fault.
func registerCases() []checkerCase {
	h1, h2 := elemHash(101), elemHash(201)
	inTurn := func(n2 int, sum2 uint64, out1, out2 string) map[int][]event {
		return map[int][]event{
			1: grant(1, 5, 0, 10, rmw(1, 5, 1, 0, 0, 101, out1)),
			2: grant(2, 6, 11, 20, rmw(2, 6, 12, n2, sum2, 201, out2)),
		}
	}
	return []checkerCase{{
		name: "two appends in turn",
		h: history{clients: inTurn(1, h1, "write-ok", "write-ok"),
			server: []serverEvent{accepted(5, false, 1, 0, 0), accepted(5, true, 2, 0, 0), accepted(6, false, 12, 0, 0), accepted(6, true, 13, 1, 1)},
			final:  map[int64]bool{101: true, 201: true}, finalN: 2, finalS: h1 + h2, end: 30},
	}, {
		// 201's acknowledged append is gone, yet the register's size and
		// hash say otherwise: only the set is wrong.
		name: "control: lost append",
		h: history{clients: inTurn(1, h1, "write-ok", "write-ok"), server: []serverEvent{accepted(5, true, 2, 0, 0), accepted(6, true, 13, 1, 1)},
			final: map[int64]bool{101: true}, finalN: 2, finalS: h1 + h2, end: 30},
		want: []string{"1 of 2 acknowledged appends are missing from the final set (first: op 201 by client 2)"},
	}, {
		// Client 2 reads the empty set after 101 was acknowledged.
		name: "control: not linearizable",
		h: history{clients: inTurn(0, 0, "write-ok", "write-stale"),
			server: []serverEvent{accepted(5, false, 1, 0, 0), accepted(5, true, 2, 0, 0), accepted(6, false, 12, 0, 0)},
			final:  map[int64]bool{101: true}, finalN: 1, finalS: h1, end: 30},
		want: []string{"is not linearizable"},
	}, {
		name: "control: lost update",
		h: history{clients: inTurn(0, 0, "write-ok", "write-ok"), server: []serverEvent{accepted(5, true, 2, 0, 0), accepted(6, true, 13, 0, 1)},
			final: map[int64]bool{201: true}, finalN: 1, finalS: h2, end: 30},
		want: []string{"missing from the final set", "not linearizable", "based on version 0 while it was at version 1"},
	}, {
		name: "unknown write that was applied",
		h:    history{clients: inTurn(1, h1, "write-unknown", "write-ok"), final: map[int64]bool{101: true, 201: true}, finalN: 2, finalS: h1 + h2, end: 30},
	}, {
		name: "unknown write that was not applied",
		h:    history{clients: inTurn(0, 0, "write-unknown", "write-ok"), final: map[int64]bool{201: true}, finalN: 1, finalS: h2, end: 30},
	}, {
		name: "control: token accepted after a higher one",
		h:    history{clients: map[int][]event{}, server: []serverEvent{accepted(6, false, 1, 0, 0), accepted(5, false, 2, 0, 0)}, end: 30},
		want: []string{"accepted token 5"},
	}, {
		name: "control: client never served after the fault",
		h: history{clients: map[int][]event{1: grant(1, 5, 0, 10), 2: grant(2, 6, 11, 20)},
			live: map[int]bool{1: true, 2: true}, healed: 5, end: 30},
		want: []string{"client 1 kept trying"},
	}}
}

// serverExcuseCases check the excuse of a resumed former etcd leader.
// The overlap starts at 10; the freezes resume before, at, or after it.
func serverExcuseCases() []checkerCase {
	leaderResumedAt8 := []serverFreeze{{member: "etcd-1", leader: true, from: 2, to: 8}}
	followerResumedAt8 := []serverFreeze{{member: "etcd-2", leader: false, from: 2, to: 8}}
	with := func(kind cluster.Kind, fs []serverFreeze, srv []serverEvent) history {
		return history{backend: kind, ttl: unitTTL, clients: overlapping(), serverFreezes: fs, server: srv, end: 40}
	}
	return []checkerCase{{
		name: "control: beliefs overlap, nothing frozen",
		h:    with(cluster.Etcd, nil, fencedLog()),
		want: []string{"no excuse applies: client 1 was not frozen; no server was frozen"},
	}, {
		name: "zookeeper, frozen leader, overlap after the resume, fenced",
		h:    with(cluster.ZooKeeper, leaderResumedAt8, fencedLog()),
		want: []string{"no known zookeeper defect"},
	}, {
		name: "zookeeper, frozen follower, fenced",
		h:    with(cluster.ZooKeeper, []serverFreeze{{member: "zk-2", from: 2, to: 8}}, fencedLog()),
		want: []string{"no known zookeeper defect"},
	}, {
		name: "etcd, frozen follower, overlap after the resume, fenced",
		h:    with(cluster.Etcd, followerResumedAt8, fencedLog()),
		want: []string{"etcd-2 was frozen as a follower"},
	}, {
		name: "etcd, frozen leader, overlap starting before the resume",
		h:    with(cluster.Etcd, []serverFreeze{{member: "etcd-1", leader: true, from: 2, to: 12}}, fencedLog()),
		want: []string{"began at 0.000s, before former leader etcd-1 was resumed"},
	}, {
		name: "etcd, frozen leader never resumed",
		h:    with(cluster.Etcd, []serverFreeze{{member: "etcd-1", leader: true, from: 2, to: never}}, fencedLog()),
		want: []string{"never resumed"},
	}, {
		name: "etcd, frozen leader, overlap starting more than a TTL after the resume",
		h:    with(cluster.Etcd, []serverFreeze{{member: "etcd-1", leader: true, from: 1, to: 4}}, fencedLog()),
		want: []string{"more than one TTL"},
	}, {
		name:    "etcd, frozen leader, overlap starting at the resume, fenced",
		h:       with(cluster.Etcd, []serverFreeze{{member: "etcd-1", leader: true, from: 2, to: 10}}, fencedLog()),
		excused: 1,
	}, {
		name:    "etcd, frozen leader, overlap starting after the resume, fenced",
		h:       with(cluster.Etcd, leaderResumedAt8, fencedLog()),
		excused: 1,
	}, {
		name:    "etcd, frozen follower then frozen leader, overlap after the leader's resume, fenced",
		h:       with(cluster.Etcd, slices.Concat(followerResumedAt8, leaderResumedAt8), fencedLog()),
		excused: 1,
	}, {
		name: "etcd, frozen leader, overlap after the resume, stale request accepted after the newer holder's",
		h:    with(cluster.Etcd, leaderResumedAt8, staleLog()),
		want: []string{"accepted token 5", "the overlap was not fenced"},
	}}
}

// frozenHistory is the overlapping() history, in which client 2's grant
// at 10 proves client 1's over on the server, with client 1 frozen in f
// and believing until to, and the register's log srv.
func frozenHistory(f window, to int64, srv []serverEvent) history {
	return history{backend: cluster.Etcd, ttl: unitTTL, clients: map[int][]event{1: grant(1, 5, 0, to), 2: grant(2, 6, 10, 30)},
		frozen: map[int][]window{1: {f}}, server: srv, end: 40}
}

// frozenClientCases check the bounds of the frozen-client excuse: the
// freeze must hold client 1 at 10, when client 2's grant proves its
// grant over, and client 1's belief may outlast 10 by no more than the
// freeze lasted.
func frozenClientCases() []checkerCase {
	return []checkerCase{{
		name:         "holder's client frozen when its grant was proven over, fenced",
		h:            frozenHistory(window{from: 2, to: 15}, 20, frozenFencedLog()),
		frozenClient: 1,
	}, {
		name:         "frozen holder's belief outlasts the proven end by the freeze's length",
		h:            frozenHistory(window{from: 2, to: 12}, 20, frozenFencedLog()),
		frozenClient: 1,
	}, {
		name: "control: frozen holder's belief outlasts the proven end by more than the freeze's length",
		h:    frozenHistory(window{from: 2, to: 12}, 21, frozenFencedLog()),
		want: []string{"client 1 was frozen from 0.000s to 0.000s, but its belief lasted until 0.000s, longer after the server had ended its grant"},
	}, {
		name:         "holder's client frozen from the moment its grant was proven over",
		h:            frozenHistory(window{from: 10, to: 25}, 20, frozenFencedLog()),
		frozenClient: 1,
	}, {
		name: "control: holder's client frozen only after its grant was proven over",
		h:    frozenHistory(window{from: 11, to: 25}, 20, frozenFencedLog()),
		want: []string{"client 1 was frozen from 0.000s to 0.000s, not when the server had ended its grant"},
	}, {
		name:         "holder's client thawed the moment its grant was proven over",
		h:            frozenHistory(window{from: 2, to: 10}, 18, frozenFencedLog()),
		frozenClient: 1,
	}, {
		name: "control: holder's client thawed before its grant was proven over",
		h:    frozenHistory(window{from: 2, to: 9}, 16, frozenFencedLog()),
		want: []string{"not when the server had ended its grant"},
	}, {
		name: "control: frozen holder overlapping a grant made before its own",
		h: history{backend: cluster.Etcd, ttl: unitTTL, clients: map[int][]event{1: grant(1, 5, 10, 20), 2: grant(2, 6, 0, 30)},
			frozen: map[int][]window{1: {{from: 2, to: 25}}}, server: frozenFencedLog(), end: 40},
		want: []string{"before any grant proved client 1's over on the server"},
	}, {
		name: "newer holder's client frozen, not the older one's",
		h: history{backend: cluster.Etcd, ttl: unitTTL, clients: overlapping(),
			frozen: map[int][]window{2: {{from: 12, to: 15}}}, server: frozenFencedLog(), end: 40},
		want: []string{"no excuse applies: client 1 was not frozen"},
	}}
}

// frozenFencingCases check the evidence the frozen-client excuse needs:
// a request with the frozen holder's token refused since the overlap
// began at 10, and none accepted after the newer holder's first.
func frozenFencingCases() []checkerCase {
	f := window{from: 2, to: 15}
	return []checkerCase{{
		name:         "frozen holder's write refused the moment the overlap began",
		h:            frozenHistory(f, 20, []serverEvent{accepted(5, false, 1, 0, 0), accepted(6, false, 10, 0, 0), refused(5, 10)}),
		frozenClient: 1,
	}, {
		name: "control: frozen holder's request refused only before the overlap",
		h:    frozenHistory(f, 20, []serverEvent{accepted(5, false, 1, 0, 0), refused(5, 9), accepted(6, false, 11, 0, 0)}),
		want: []string{"client 1 was frozen, but no request with its token 5 was refused from 0.000s on"},
	}, {
		name: "control: frozen holder, none of its requests refused",
		h:    frozenHistory(f, 20, fencedLog()),
		want: []string{"client 1 was frozen, but no request with its token 5 was refused"},
	}, {
		name: "holder's client frozen, stale request accepted after the newer holder's",
		h:    frozenHistory(f, 20, append(staleLog(), refused(5, 17))),
		want: []string{"accepted token 5", "the overlap was not fenced"},
	}}
}

// revokedCases check the excuse of a revoked holder. Client 1 (token 5)
// is frozen 2-9, Revoke is called at 7 and returns at 8, client 2 is
// granted at 10: the TTL reaches from the thaw at 9 to 14.
func revokedCases() []checkerCase {
	revoked := func(kind cluster.Kind, to int64, frozen map[int][]window, rv revocation, srv []serverEvent) history {
		return history{backend: kind, ttl: unitTTL, clients: map[int][]event{1: grant(1, 5, 0, to), 2: grant(2, 6, 10, 30)},
			frozen: frozen, revoked: map[uint64]revocation{5: rv}, server: srv, end: 40}
	}
	frozen := map[int][]window{1: {{from: 2, to: 9}}}
	return []checkerCase{{
		name:    "revoked holder told within a TTL of its thaw, fenced",
		h:       revoked(cluster.Etcd, 14, frozen, revocation{client: 1, called: 7, at: 8, resumed: 9}, fencedLog()),
		revoked: 1,
	}, {
		name: "control: revoked holder told more than a TTL after its thaw",
		h:    revoked(cluster.Etcd, 15, frozen, revocation{client: 1, called: 7, at: 8, resumed: 9}, fencedLog()),
		want: []string{"client 1 believed it held the lock (token 5)", "not when the server had ended its grant"},
	}, {
		name:    "revoked holder, the newer grant before Revoke returned",
		h:       revoked(cluster.ZooKeeper, 14, nil, revocation{client: 1, called: 10, at: 11, resumed: 11}, fencedLog()),
		revoked: 1,
	}, {
		name: "control: holder revoked after the newer grant",
		h:    revoked(cluster.ZooKeeper, 14, nil, revocation{client: 1, called: 11, at: 12, resumed: 12}, fencedLog()),
		want: []string{"client 1 believed it held the lock (token 5)"},
	}, {
		name: "control: another client's grant revoked",
		h:    revoked(cluster.ZooKeeper, 14, nil, revocation{client: 3, called: 7, at: 8, resumed: 8}, fencedLog()),
		want: []string{"client 1 believed it held the lock (token 5)"},
	}, {
		name: "revoked holder, stale request accepted after the newer holder's",
		h:    revoked(cluster.Etcd, 14, nil, revocation{client: 1, called: 7, at: 8, resumed: 9}, staleLog()),
		want: []string{"accepted token 5", "the overlap was not fenced"},
	}}
}

// readerCases check the rw workload: readers share, a writer shares with
// no one, and a reader reads through the register with its token.
func readerCases() []checkerCase {
	h1 := elemHash(101)
	rw := func(clients map[int][]event, frozen map[int][]window, srv []serverEvent) history {
		return history{backend: cluster.ZooKeeper, ttl: unitTTL, clients: clients, frozen: frozen, server: srv, end: 40}
	}
	writerFrozen := map[int][]window{1: {{from: 2, to: 15}}}
	return []checkerCase{{
		name: "readers overlap",
		h:    rw(map[int][]event{1: readGrant(1, 5, 0, 20), 2: readGrant(2, 6, 10, 30)}, nil, nil),
	}, {
		name: "control: a writer overlaps a reader",
		h:    rw(map[int][]event{1: readGrant(1, 5, 0, 20), 2: grant(2, 6, 10, 30)}, nil, nil),
		want: []string{"client 1 believed it held the lock (token 5) from 0.000s to 0.000s, but client 2 was granted it (token 6)"},
	}, {
		name: "control: a reader overlaps a writer",
		h:    rw(map[int][]event{1: grant(1, 5, 0, 20), 2: readGrant(2, 6, 10, 30)}, nil, nil),
		want: []string{"client 2 was granted it (token 6)"},
	}, {
		// Client 2's read at 11 makes the register refuse the frozen
		// writer's write once it is thawed.
		name: "a reader overlaps a frozen writer, whose write was refused after the reader's read",
		h: rw(map[int][]event{1: grant(1, 5, 0, 20), 2: readGrant(2, 6, 10, 30, sharedRead(2, 6, 11, 0, 0))}, writerFrozen,
			[]serverEvent{accepted(5, false, 1, 0, 0), {T: 11, Token: 6, Status: http.StatusOK, Shared: true}, refused(5, 16)}),
		frozenClient: 1,
	}, {
		// A reader that sends nothing leaves the register's token where
		// it was: the thawed writer's write lands while the reader holds.
		name: "control: a reader that read nothing overlaps a frozen writer, whose write was accepted",
		h: rw(map[int][]event{1: grant(1, 5, 0, 20), 2: readGrant(2, 6, 10, 30)}, writerFrozen,
			[]serverEvent{accepted(5, false, 1, 0, 0), accepted(5, true, 16, 0, 0)}),
		want: []string{"client 1 was frozen, but no request with its token 5 was refused"},
	}, {
		name: "a reader reads the set a writer left",
		h: history{clients: map[int][]event{
			1: grant(1, 5, 0, 10, rmw(1, 5, 1, 0, 0, 101, "write-ok")),
			2: readGrant(2, 6, 11, 20, sharedRead(2, 6, 12, 1, h1)),
		}, final: map[int64]bool{101: true}, finalN: 1, finalS: h1, end: 30},
	}, {
		name: "control: a reader reads an append never made",
		h:    history{clients: map[int][]event{1: readGrant(1, 5, 0, 10, sharedRead(1, 5, 1, 1, h1))}, final: map[int64]bool{}, end: 30},
		want: []string{"is not linearizable"},
	}}
}

// permitCases check the semaphore's limit without a frozen holder.
func permitCases() []checkerCase {
	sem := func(frozen map[int][]window, third int64) history {
		return history{backend: cluster.Etcd, ttl: unitTTL, limit: 2,
			clients: map[int][]event{1: permit(1, 5, 0, 20), 2: permit(2, 6, 10, 30), 3: permit(3, 7, third, 40)}, frozen: frozen, end: 50}
	}
	return []checkerCase{{
		name: "permits within the limit",
		h:    sem(nil, 20),
	}, {
		name: "control: one permit over the limit",
		h:    sem(nil, 15),
		want: []string{"3 permits of a semaphore of limit 2 were believed held at 0.000s", "no server was frozen"},
	}, {
		name: "control: one permit over the limit, only the newest holder frozen",
		h:    sem(map[int][]window{3: {{from: 16, to: 18}}}, 15),
		want: []string{"3 permits of a semaphore of limit 2", "client 1 was not frozen; client 2 was not frozen"},
	}}
}

// permitHistory: client 1 holds permit 5 from 0 to to, and under it lock
// token 50 from 1 to to; clients 2 and 3 take permits 6 and 7 at 10 and
// 15, so that at 15 three permits of limit 2 are believed held: the
// grant that proves client 1's permit over on the server. Client 1 is
// frozen in f, and its write with token 50 refused at refusedAt.
func permitHistory(f window, to, refusedAt int64) history {
	return history{backend: cluster.ZooKeeper, ttl: unitTTL, limit: 2,
		clients: map[int][]event{
			1: {{T: 0, Client: 1, Kind: "sem-ok", Token: 5}, {T: 1, Client: 1, Kind: "acq-ok", Token: 50},
				{T: to, Client: 1, Kind: "rel", Token: 50}, {T: to, Client: 1, Kind: "sem-rel", Token: 5}},
			2: permit(2, 6, 10, 30), 3: permit(3, 7, 15, 40),
		},
		frozen: map[int][]window{1: {f}}, server: []serverEvent{accepted(50, false, 2, 0, 0), refused(50, refusedAt)}, end: 50}
}

// frozenPermitCases check the bounds of the frozen-holder excuse of the
// semaphore (see permitHistory): only the frozen holder's own permit,
// frozen at 15 and believed no longer after it than the freeze lasted,
// and only with its write refused since 15.
func frozenPermitCases() []checkerCase {
	return []checkerCase{{
		name:          "one permit over the limit, the frozen holder's own, fenced",
		h:             permitHistory(window{from: 12, to: 18}, 20, 19),
		permitsFrozen: 1,
	}, {
		name:          "frozen holder's permit outlasts the proven end by the freeze's length",
		h:             permitHistory(window{from: 12, to: 17}, 20, 19),
		permitsFrozen: 1,
	}, {
		name: "control: frozen holder's permit outlasts the proven end by more than the freeze's length",
		h:    permitHistory(window{from: 12, to: 16}, 20, 19),
		want: []string{"3 permits of a semaphore of limit 2", "longer after the server had ended its grant"},
	}, {
		name:          "permit holder frozen from the grant that proved its permit over",
		h:             permitHistory(window{from: 15, to: 30}, 20, 19),
		permitsFrozen: 1,
	}, {
		name: "control: permit holder frozen only after the grant that proved its permit over",
		h:    permitHistory(window{from: 16, to: 30}, 20, 19),
		want: []string{"3 permits of a semaphore of limit 2", "not when the server had ended its grant"},
	}, {
		name:          "frozen permit holder's write refused at the grant over the limit",
		h:             permitHistory(window{from: 12, to: 18}, 20, 15),
		permitsFrozen: 1,
	}, {
		name: "control: frozen permit holder's write refused only before the grant over the limit",
		h:    permitHistory(window{from: 12, to: 18}, 20, 14),
		want: []string{"none of its requests under a lock it took while holding permit 5 was refused"},
	}, {
		name: "control: two permits over the limit, one holder frozen",
		h: func() history {
			h := permitHistory(window{from: 12, to: 18}, 20, 19)
			h.clients[4] = permit(4, 8, 16, 40)
			return h
		}(),
		want: []string{"4 permits of a semaphore of limit 2", "3 of them are not a frozen holder's own stale permit"},
	}}
}

// lockDelayCases check the lock-delay after a crash: client 1 (token 5)
// granted at 0 and killed at 5; its record was listed last at 8 and found
// gone at 10. Client 2 (token 6) is granted at t.
func lockDelayCases() []checkerCase {
	const lockDelay = 20
	crashed := func(kind cluster.Kind, t, delay int64) history {
		return history{backend: kind, ttl: unitTTL, clients: map[int][]event{1: {{T: 0, Client: 1, Kind: "acq-ok", Token: 5}}, 2: grant(2, 6, t, t+5)},
			killed: map[int]int64{1: 5}, lockDelay: time.Duration(delay), vanished: []vanish{{client: 1, token: 5, lastSeen: 8, goneAt: 10}}, end: 50}
	}
	noGrant := crashed(cluster.Etcd, 0, lockDelay)
	noGrant.clients = map[int][]event{1: {{T: 0, Client: 1, Kind: "acq-ok", Token: 5}}}
	return []checkerCase{{
		name:    "grant the lock-delay after the last listing that showed the crashed holder's record",
		h:       crashed(cluster.Etcd, 8+lockDelay, lockDelay),
		delayed: 1,
	}, {
		name: "control: grant sooner than the lock-delay after the last listing that showed the record",
		h:    crashed(cluster.ZooKeeper, 8+lockDelay-1, lockDelay),
		want: []string{"client 2 was granted the lock (token 6) at 0.000s, 19ns after the last listing that still showed crashed client 1's record (token 5); want at least the lock-delay 20ns"},
	}, {
		name: "control: no grant after the crashed holder",
		h:    noGrant,
		want: []string{"no grant followed client 1's (token 5) record"},
	}, {
		name: "no lock-delay required: an early grant is not checked",
		h:    crashed(cluster.Etcd, 11, 0),
	}}
}

// TestFaultCheckersReaderToken runs the rw workload's reader against the
// in-memory Locker and a fenced register, without a cluster: its reads
// must reach the register with its read lock's token, marked as a
// reader's, so that the register refuses a writer granted before it (the
// evidence the rw checker asks of a frozen writer); and the faults must
// pass them over for the next writer's read.
func TestFaultCheckersReaderToken(t *testing.T) {
	ctx := context.Background()
	reg := newRegister(t, monoNow(), true)
	logPath := filepath.Join(t.TempDir(), "client-1.jsonl")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	locker := locktest.NewMemory().NewLocker("client-1")
	t.Cleanup(func() { locker.Close() })
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	w := &worker{cfg: clientConfig{ID: 1, Lock: "register", Register: reg.URL(), RMWs: 2, OpBase: 1000,
		AcquireTimeout: 5 * time.Second, ReleaseTimeout: 5 * time.Second, Workload: workloadRW},
		lg: &eventLog{f: f, id: 1, start: reg.start}, base: base, locker: locker}

	writer, err := locker.Acquire(ctx, "register")
	if err != nil {
		t.Fatalf("Acquire() = %v", err)
	}
	if err := writer.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	r := &run{reg: reg, cfg: runConfig{ttl: time.Millisecond}}
	picked := make(chan serverEvent, 1)
	go func() {
		e, _ := r.nextAccepted(isRead, func(serverEvent) {})
		picked <- e
	}()
	w.grant(ctx, true)  // the reader's grant and reads
	w.grant(ctx, false) // the next writer's grant, whose read a fault may pick

	var reader event
	for _, e := range (&clientProc{cfg: clientConfig{LogPath: logPath}}).events() {
		if e.Kind == "acq-ok" && e.Shared {
			reader = e
		}
	}
	if reader.Token <= uint64(writer.Token()) {
		t.Fatalf("reader granted token %d; want one above the earlier writer's %v", reader.Token, writer.Token())
	}
	var reads int
	for _, e := range reg.events() {
		if e.Shared && e.Status == http.StatusOK && e.Token == reader.Token && !e.Write {
			reads++
		}
	}
	if reads != 2 {
		t.Errorf("the register accepted %d reads marked as a reader's with token %d; want 2 (RMWs)", reads, reader.Token)
	}
	if e := <-picked; e.Shared || e.Token <= reader.Token {
		t.Errorf("nextAccepted(isRead) picked %+v; want the next writer's read, not the reader's", e)
	}
	req, _ := http.NewRequest(http.MethodPost, reg.URL()+"?base=0&op=1", nil)
	req.Header.Set(httpfence.Header, writer.Token().String())
	if _, status, err := do(&http.Client{Transport: base}, req); err != nil || status != http.StatusConflict {
		t.Errorf("write with the earlier writer's token %v after the reader's reads = status %d, %v; want %d", writer.Token(), status, err, http.StatusConflict)
	}
}
