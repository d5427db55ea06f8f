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
		{"22222", []bool{true, true, false, false, false}, map[int][]int{2: {0, 1}, 3: {2}, 4: {3}}},
		{"333333", []bool{true, true, true, false, false, false}, map[int][]int{3: {0, 1, 2}, 4: {3}, 5: {4}}},
		{"3333", []bool{true, true, true, false}, map[int][]int{3: {0, 1, 2}}},
		{"11", []bool{true, false}, map[int][]int{1: {0}}},
		{"111", []bool{true, false, false}, map[int][]int{1: {0}, 2: {1}}},
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
// records. That no waiter misses its turn is TestWakeUps.
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

func TestTouch(t *testing.T) {
	tests := []struct {
		queue   string
		waits   []int // the waiters that wake on a touch of what they watch
		touches []int // the admitted requests that touch
	}{
		{"x", nil, nil},
		{"xxx", nil, nil},
		{"sxs", nil, nil},
		{"2", nil, nil},
		{"22", nil, []int{0}},
		{"222", nil, []int{0, 1}},
		{"22222", []int{3, 4}, []int{0, 1}},
		{"111", []int{2}, []int{0}},
		{"3333", nil, []int{0, 1, 2}},
		{"x22", nil, nil},      // 2 watches x, 3 watches 1? no: the nearest incompatible
		{"2x2", nil, nil},      // the permits are not next to each other
		{"223", nil, []int{0}}, // 3 is incompatible with the 2s
	}
	for _, tt := range tests {
		t.Run(tt.queue, func(t *testing.T) {
			q := parse(tt.queue)
			for i := range q {
				if Admitted(q, i) {
					if got, want := Touches(q, i), slices.Contains(tt.touches, i); got != want {
						t.Errorf("Touches(%s, %d) = %v; want %v", tt.queue, i, got, want)
					}
					continue
				}
				if got, want := WaitsForTouch(q, i), slices.Contains(tt.waits, i); got != want {
					t.Errorf("WaitsForTouch(%s, %d) = %v; want %v", tt.queue, i, got, want)
				}
			}
		})
	}
}

// TestWakeUps proves, over every queue of up to 6 requests including mixed
// ones, and every deletion from it, that the herd-free rule wakes every
// waiter that needs it and few others. The waiters watch what Watched
// names in the queue before the deletion; the deletion wakes the
// waiters that watch the deleted record; a woken waiter that the deletion
// admitted touches its record if Touches says so, which wakes the waiters
// that watch that record with WaitsForTouch (a backend that does not
// filter touches wakes the others too: they are counted in the bounds).
// Checked:
//
//   - every waiter the deletion admits is woken;
//   - every waiter not woken watches, in the new queue, exactly the
//     records it watches already, with the same WaitsForTouch, so that by
//     induction every state reached by deletions and arrivals has every
//     waiter watching what the rule names;
//   - in a semaphore's queue, a deletion wakes, besides the waiter it
//     admits, at most one waiter (the successor of a deleted waiter, which
//     re-examines the queue), and none when it releases a permit; each
//     touch wakes exactly one waiter, the touching request's successor;
//   - in a lock's queue, a deletion wakes only its successor or, for a
//     writer, the readers right behind it (the rule as it always was).
//
// Mixed queues exist only while a refused request's record goes; they get
// the first two checks, not the bounds.
func TestWakeUps(t *testing.T) {
	for _, d := range allQueues(6, "xs123") {
		q := parse(d)
		consistent := true
		for i := range q {
			consistent = consistent && compatible(q[0], q[i])
		}
		// Records are named by their position in q.
		watched := make([][]int, len(q))
		touchWake := make([]bool, len(q))
		for i := range q {
			if !Admitted(q, i) {
				watched[i] = Watched(q, i)
				touchWake[i] = WaitsForTouch(q, i)
			}
		}
		for k := range q {
			checkDeletion(t, d, q, k, watched, touchWake, consistent)
		}
	}
}

func checkDeletion(t *testing.T, d string, q []Request, k int, watched [][]int, touchWake []bool, consistent bool) {
	t.Helper()
	// ids[p] is the record at position p of the queue after the deletion.
	var ids []int
	for i := range q {
		if i != k {
			ids = append(ids, i)
		}
	}
	after := make([]Request, len(ids))
	for p, id := range ids {
		after[p] = q[id]
	}
	pos := func(id int) int { return slices.Index(ids, id) }
	admitted := func(id int) bool { return Admitted(after, pos(id)) }
	newlyAdmitted := func(id int) bool { return id != k && watched[id] != nil && admitted(id) }

	woken := map[int]bool{}
	byDeletion := 0
	for id := range q {
		if slices.Contains(watched[id], k) {
			woken[id] = true
			if !newlyAdmitted(id) {
				byDeletion++
			}
		}
	}
	// Touches, until no woken waiter is left to touch. touchWoken counts
	// every watcher of a touched record, filtered or not.
	touched := map[int]bool{}
	for more := true; more; {
		more = false
		for id := range woken {
			if touched[id] || !newlyAdmitted(id) || !Touches(after, pos(id)) {
				continue
			}
			touched[id] = true
			more = true
			watchers := 0
			for w := range q {
				if w != k && slices.Contains(watched[w], id) {
					watchers++
					if touchWake[w] {
						woken[w] = true
					}
				}
			}
			if consistent && watchers != 1 {
				t.Errorf("queue %s, delete %d: the touch of %d wakes %d waiters; want 1", d, k, id, watchers)
			}
		}
	}
	for id := range q {
		if id == k || watched[id] == nil {
			continue
		}
		if admitted(id) {
			if !woken[id] {
				t.Errorf("queue %s, delete %d: waiter %d admitted without a wake-up", d, k, id)
			}
			continue
		}
		if woken[id] {
			continue
		}
		var now []int
		for _, p := range Watched(after, pos(id)) {
			now = append(now, ids[p])
		}
		if !slices.Equal(now, watched[id]) || WaitsForTouch(after, pos(id)) != touchWake[id] {
			t.Errorf("queue %s, delete %d: waiter %d, not woken, watches %v (touch %v); the rule says %v (touch %v)",
				d, k, id, watched[id], touchWake[id], now, WaitsForTouch(after, pos(id)))
		}
	}
	if !consistent {
		return
	}
	if q[k].Kind == Permit {
		if byDeletion > 1 {
			t.Errorf("queue %s, delete %d: %d waiters woken and not admitted; want at most 1", d, k, byDeletion)
		}
		if watched[k] == nil && byDeletion > 0 {
			t.Errorf("queue %s, release of permit %d: woke %d waiters it does not admit", d, k, byDeletion)
		}
		return
	}
	// A lock's deletion wakes its successor, or the readers right
	// behind a writer, as it always has.
	for id := range woken {
		if id == k+1 || q[id].Kind == Shared && !slices.Contains(parseKinds(q[k+1:id]), Exclusive) && q[k].Kind == Exclusive {
			continue
		}
		t.Errorf("queue %s, delete %d: woke waiter %d, neither its successor nor a reader right behind it", d, k, id)
	}
}

func parseKinds(q []Request) []Kind {
	ks := make([]Kind, len(q))
	for i, r := range q {
		ks[i] = r.Kind
	}
	return ks
}

// TestAdmittedByDeletion checks, over every queue of up to 6 requests, that
// a waiter AdmittedByDeletion names is admitted by the deletion of each
// record it watches, which lets a backend skip the read after one.
func TestAdmittedByDeletion(t *testing.T) {
	for _, d := range allQueues(6, "xs123") {
		q := parse(d)
		for i := range q {
			if Admitted(q, i) || !AdmittedByDeletion(q, i) {
				continue
			}
			for _, k := range Watched(q, i) {
				after := append(slices.Clone(q[:k]), q[k+1:]...)
				if !Admitted(after, i-1) {
					t.Errorf("queue %s: waiter %d is not admitted when watched record %d goes", d, i, k)
				}
			}
		}
	}
	for _, tt := range []struct {
		queue string
		i     int
		want  bool
	}{{"22222", 2, true}, {"22222", 3, false}, {"33333", 3, true}, {"x2", 1, false}, {"2x2", 2, false}, {"11", 1, true}} {
		if got := AdmittedByDeletion(parse(tt.queue), tt.i); got != tt.want {
			t.Errorf("AdmittedByDeletion(%s, %d) = %v; want %v", tt.queue, tt.i, got, tt.want)
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
