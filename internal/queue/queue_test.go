package queue

import (
	"slices"
	"strings"
	"testing"
)

// parse builds a queue from a compact description: "x" exclusive, "s"
// shared, a digit a permit of that limit.
func parse(desc string) []Request {
	var q []Request
	for _, c := range desc {
		switch {
		case c == 'x':
			q = append(q, ExclusiveRequest)
		case c == 's':
			q = append(q, SharedRequest)
		default:
			q = append(q, PermitRequest(int(c-'0')))
		}
	}
	return q
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
		// Mixed queues, which exist only while a refused request's record
		// is on its way out: nobody is admitted together with an earlier
		// incompatible request, and a waiter watches the nearest one.
		{"x3", []bool{true, false}, map[int][]int{1: {0}}},
		{"s33", []bool{true, false, false}, map[int][]int{1: {0}, 2: {0}}},
		{"3s", []bool{true, false}, map[int][]int{1: {0}}},
		{"3x", []bool{true, false}, map[int][]int{1: {0}}},
		{"323", []bool{true, false, false}, map[int][]int{1: {0}, 2: {1}}},
		{"x3s", []bool{true, false, false}, map[int][]int{1: {0}, 2: {1}}},
	}
	for _, tt := range tests {
		t.Run(tt.queue, func(t *testing.T) {
			q := parse(tt.queue)
			for i := range q {
				if got := Admitted(q, i); got != tt.admitted[i] {
					t.Errorf("Admitted(%s, %d) = %v; want %v", tt.queue, i, got, tt.admitted[i])
				}
				if tt.admitted[i] {
					continue
				}
				if got := Watched(q, i); !slices.Equal(got, tt.watched[i]) {
					t.Errorf("Watched(%s, %d) = %v; want %v", tt.queue, i, got, tt.watched[i])
				}
			}
		})
	}
}

// allQueues returns every queue of up to n requests over the given
// alphabet.
func allQueues(n int, alphabet string) []string {
	qs := []string{""}
	var out []string
	for range n {
		var next []string
		for _, q := range qs {
			for _, c := range alphabet {
				next = append(next, q+string(c))
			}
		}
		out = append(out, next...)
		qs = next
	}
	return out
}

// TestInvariants checks, over every queue of up to 6 requests including
// mixed ones, what the backends and Holders rely on: the first request is
// admitted; the admitted requests are a prefix; no two admitted requests
// are incompatible; at most one exclusive request is admitted, and then
// alone; at most n permits of limit n; and a waiter watches only earlier
// records, of which at least one must go before it can be admitted.
func TestInvariants(t *testing.T) {
	for _, d := range allQueues(6, "xs23") {
		q := parse(d)
		var adm []Request
		seenWaiter := false
		for i := range q {
			a := Admitted(q, i)
			if i == 0 && !a {
				t.Errorf("queue %s: first request not admitted", d)
			}
			if a && seenWaiter {
				t.Errorf("queue %s: position %d admitted after a waiter", d, i)
			}
			seenWaiter = seenWaiter || !a
			if a {
				adm = append(adm, q[i])
				continue
			}
			w := Watched(q, i)
			if len(w) == 0 {
				t.Errorf("queue %s: waiter %d watches nothing", d, i)
			}
			for _, j := range w {
				if j < 0 || j >= i {
					t.Errorf("queue %s: waiter %d watches position %d", d, i, j)
				}
			}
			// Deleting every record it does not watch must not admit it:
			// it would then be admitted without being woken.
			var rest []Request
			for j := range i {
				if slices.Contains(w, j) {
					rest = append(rest, q[j])
				}
			}
			rest = append(rest, q[i])
			if Admitted(rest, len(rest)-1) {
				t.Errorf("queue %s: waiter %d is admitted once the unwatched records go, without a wake-up", d, i)
			}
		}
		for i := range adm {
			for j := range adm {
				if i != j && Incompatible(adm[i], adm[j]) != "" {
					t.Errorf("queue %s: incompatible requests %v and %v both admitted", d, adm[i], adm[j])
				}
			}
			if adm[i].Kind == Exclusive && len(adm) > 1 {
				t.Errorf("queue %s: an exclusive request admitted with %d others", d, len(adm)-1)
			}
			if adm[i].Kind == Permit && len(adm) > adm[i].Limit {
				t.Errorf("queue %s: %d admitted with a permit of limit %d", d, len(adm), adm[i].Limit)
			}
		}
	}
}

func TestIncompatible(t *testing.T) {
	tests := []struct {
		head, r Request
		want    string // a substring of the explanation; "" for none
	}{
		{ExclusiveRequest, SharedRequest, ""},
		{SharedRequest, ExclusiveRequest, ""},
		{PermitRequest(3), PermitRequest(3), ""},
		{PermitRequest(3), PermitRequest(2), "semaphore limit 2; the name's queued requests have limit 3"},
		{ExclusiveRequest, PermitRequest(2), "semaphore request on a name in use as a lock"},
		{PermitRequest(4), SharedRequest, "in use as a semaphore of limit 4"},
	}
	for _, tt := range tests {
		got := Incompatible(tt.head, tt.r)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("Incompatible(%v, %v) = %q; want %q", tt.head, tt.r, got, tt.want)
		}
	}
}

func TestTag(t *testing.T) {
	for _, r := range []Request{ExclusiveRequest, SharedRequest, PermitRequest(1), PermitRequest(10), PermitRequest(MaxLimit)} {
		got, ok := ParseTag(r.Tag())
		if !ok || got != r {
			t.Errorf("ParseTag(%q) = %v, %v; want %v", r.Tag(), got, ok, r)
		}
		if strings.ContainsAny(r.Tag(), "~/#") {
			t.Errorf("tag %q contains a separator", r.Tag())
		}
	}
	for _, bad := range []string{"x", "R", "rr", "s", "s0", "s01", "s-1", "s+1", "s2147483648", "s99999999999", "s1a", " s1", "e"} {
		if r, ok := ParseTag(bad); ok {
			t.Errorf("ParseTag(%q) = %v, true; want false", bad, r)
		}
	}
}

func TestCheckLimit(t *testing.T) {
	for _, n := range []int{1, 4, MaxLimit} {
		if err := CheckLimit(n); err != nil {
			t.Errorf("CheckLimit(%d) = %v", n, err)
		}
	}
	for _, n := range []int{0, -1, MaxLimit + 1} {
		if err := CheckLimit(n); err == nil {
			t.Errorf("CheckLimit(%d) = nil; want an error", n)
		}
	}
}

func FuzzParseTag(f *testing.F) {
	for _, s := range []string{"", "r", "s1", "s42", "s0", "s2147483647", "s2147483648", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		r, ok := ParseTag(tag)
		if !ok {
			if r != (Request{}) {
				t.Fatalf("ParseTag(%q) = %v, false; want the zero Request", tag, r)
			}
			return
		}
		if r.Tag() != tag {
			t.Fatalf("ParseTag(%q) = %v, whose tag is %q", tag, r, r.Tag())
		}
		if r.Kind == Permit && CheckLimit(r.Limit) != nil {
			t.Fatalf("ParseTag(%q) accepted limit %d", tag, r.Limit)
		}
	})
}
