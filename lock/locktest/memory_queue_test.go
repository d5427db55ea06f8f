package locktest

import (
	"slices"
	"testing"

	"github.com/fencelock/fencelock/fencing"
)

// queue builds a queue from a compact description: "x" exclusive, "s"
// shared, a digit a permit of that limit.
func queue(desc string) []*record {
	var q []*record
	for i, c := range desc {
		r := &record{token: tokenOf(i)}
		switch {
		case c == 'x':
			r.kind = exclusive
		case c == 's':
			r.kind = shared
		default:
			r.kind, r.limit = permit, int(c-'0')
		}
		q = append(q, r)
	}
	return q
}

func tokenOf(i int) fencing.Token { return fencing.Token(i + 1) }

func positions(q, rs []*record) []int {
	var ps []int
	for _, r := range rs {
		ps = append(ps, slices.Index(q, r))
	}
	return ps
}

func TestAdmittedAndWatched(t *testing.T) {
	tests := []struct {
		queue    string
		admitted []bool
		watched  map[int][]int // for each waiter, the positions it watches
	}{
		{"x", []bool{true}, nil},
		{"xx", []bool{true, false}, map[int][]int{1: {0}}},
		{"sss", []bool{true, true, true}, nil},
		{"ssxss", []bool{true, true, false, false, false}, map[int][]int{2: {1}, 3: {2}, 4: {2}}},
		{"xsxs", []bool{true, false, false, false}, map[int][]int{1: {0}, 2: {1}, 3: {2}}},
		{"sxsxs", []bool{true, false, false, false, false}, map[int][]int{1: {0}, 2: {1}, 3: {2}, 4: {3}}},
		{"22222", []bool{true, true, false, false, false}, map[int][]int{2: {0, 1}, 3: {1, 2}, 4: {2, 3}}},
		{"3333", []bool{true, true, true, false}, map[int][]int{3: {0, 1, 2}}},
		{"11", []bool{true, false}, map[int][]int{1: {0}}},
	}
	for _, tt := range tests {
		t.Run(tt.queue, func(t *testing.T) {
			q := queue(tt.queue)
			for i, r := range q {
				if got := admitted(q, i, r.kind, r.limit); got != tt.admitted[i] {
					t.Errorf("admitted(%s, %d) = %v; want %v", tt.queue, i, got, tt.admitted[i])
				}
				if tt.admitted[i] {
					continue
				}
				if got := positions(q, watched(q, i)); !slices.Equal(got, tt.watched[i]) {
					t.Errorf("watched(%s, %d) = positions %v; want %v", tt.queue, i, got, tt.watched[i])
				}
			}
		})
	}
}

// TestAdmittedIsPrefix checks what Holders relies on: the admitted
// records of any consistent queue are a prefix of it.
func TestAdmittedIsPrefix(t *testing.T) {
	var descs []string
	for n := 1; n <= 6; n++ {
		for bits := range 1 << n {
			d := make([]byte, n)
			for i := range n {
				d[i] = "xs"[bits>>i&1]
			}
			descs = append(descs, string(d))
		}
		for _, limit := range []int{1, 2, 3} {
			descs = append(descs, string(slices.Repeat([]byte{byte('0' + limit)}, n)))
		}
	}
	for _, d := range descs {
		q := queue(d)
		seenWaiter := false
		for i, r := range q {
			a := admitted(q, i, r.kind, r.limit)
			if a && seenWaiter {
				t.Errorf("queue %s: position %d admitted after a waiter; want the admitted records to be a prefix", d, i)
			}
			seenWaiter = seenWaiter || !a
		}
		if !admitted(q, 0, q[0].kind, q[0].limit) {
			t.Errorf("queue %s: first record not admitted", d)
		}
	}
}
