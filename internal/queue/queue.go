// Package queue holds the rules that every backend applies to a name's
// queue of requests (documented on lock.SharedLocker): which kinds of
// request may share a queue, which requests are admitted, which records a
// waiter watches and which admitted requests touch their record to wake
// the waiter behind them, and how a request's kind is written into its record's
// key (etcd) or znode name (ZooKeeper), so that one listing of the queue
// tells every record's kind without reading the records.
package queue

import (
	"fmt"
	"strconv"
)

// Kind is what a request asks for.
type Kind uint8

// String returns the kind's name in metrics and spans: "exclusive",
// "shared" or "permit".
func (k Kind) String() string {
	switch k {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Permit:
		return "permit"
	}
	return "unknown"
}

const (
	Exclusive Kind = iota // Acquire, TryAcquire: the write lock
	Shared                // AcquireShared, TryAcquireShared: a read lock
	Permit                // AcquireSemaphore, TryAcquireSemaphore
)

// MaxLimit is the largest semaphore limit a tag can carry.
const MaxLimit = 1<<31 - 1

// Request is one request of a queue: its kind and, for a permit, the
// semaphore's limit (0 otherwise).
type Request struct {
	Kind  Kind
	Limit int
}

// Lock requests.
var (
	ExclusiveRequest = Request{Kind: Exclusive}
	SharedRequest    = Request{Kind: Shared}
)

// PermitRequest is a semaphore request with the given limit.
func PermitRequest(limit int) Request { return Request{Kind: Permit, Limit: limit} }

// CheckLimit returns an error when limit cannot be a semaphore's limit.
// The caller wraps it with lock.ErrInvalidConfig.
func CheckLimit(limit int) error {
	if limit < 1 || limit > MaxLimit {
		return fmt.Errorf("semaphore limit %d, want 1 to %d", limit, MaxLimit)
	}
	return nil
}

// Tag is the request's kind as written in its record's name: "" for an
// exclusive request (so that the records of exclusive locks keep the
// names they have always had), "r" for a shared one, "s" and the limit in
// decimal for a permit. A tag never contains '~', '/' or '#'.
func (r Request) Tag() string {
	switch r.Kind {
	case Shared:
		return "r"
	case Permit:
		return "s" + strconv.Itoa(r.Limit)
	}
	return ""
}

// ParseTag is the inverse of Tag. It accepts exactly the strings Tag
// returns: no sign, no leading zero, a limit from 1 to MaxLimit.
func ParseTag(tag string) (Request, bool) {
	switch {
	case tag == "":
		return ExclusiveRequest, true
	case tag == "r":
		return SharedRequest, true
	case len(tag) < 2 || len(tag) > 11 || tag[0] != 's' || tag[1] == '0':
		return Request{}, false
	}
	n := 0
	for _, c := range tag[1:] {
		if c < '0' || c > '9' {
			return Request{}, false
		}
		n = n*10 + int(c-'0')
	}
	if n > MaxLimit {
		return Request{}, false
	}
	return PermitRequest(n), true
}

// Shared reports whether a grant of r is shared with others (a read lock
// or a permit), as lock.Holder.Shared says.
func (r Request) Shared() bool { return r.Kind != Exclusive }

// compatible reports whether two requests may be granted from one queue:
// both lock requests (shared or exclusive), or both permits of one limit.
func compatible(a, b Request) bool {
	if a.Kind == Permit || b.Kind == Permit {
		return a == b
	}
	return true
}

// Incompatible explains why a request r cannot join a queue whose earliest
// request is head, or returns "" if it can. The earliest request decides
// what the name is until its queue is empty again. The caller wraps the
// explanation with lock.ErrIncompatible.
func Incompatible(head, r Request) string {
	switch {
	case compatible(head, r):
		return ""
	case r.Kind == Permit && head.Kind != Permit:
		return "a semaphore request on a name in use as a lock"
	case r.Kind != Permit && head.Kind == Permit:
		return fmt.Sprintf("a lock request on a name in use as a semaphore of limit %d", head.Limit)
	}
	return fmt.Sprintf("semaphore limit %d; the name's queued requests have limit %d", r.Limit, head.Limit)
}

// Admitted reports whether the request at position i of q (in creation
// order) is granted:
//
//   - no earlier request incompatible with it remains, and
//   - exclusive: no earlier request remains;
//   - shared: no earlier exclusive request remains;
//   - a permit of limit n: fewer than n earlier requests remain.
//
// The first rule matters only while a refused request's record is on its
// way out: the backends create a record before they can compare it with
// the queue, and a later request may take such a record for the head. It
// makes such a mixed queue wait rather than admit incompatible requests
// together, so the limits and exclusions hold in every queue, consistent
// or not. The admitted requests of any queue are a prefix of it.
func Admitted(q []Request, i int) bool {
	r := q[i]
	for _, e := range q[:i] {
		if !compatible(e, r) {
			return false
		}
	}
	switch r.Kind {
	case Shared:
		for _, e := range q[:i] {
			if e.Kind == Exclusive {
				return false
			}
		}
		return true
	case Permit:
		return i < r.Limit
	}
	return i == 0
}

// Watched returns the positions in q of the records the request at
// position i, not admitted, watches (the herd-free rule on
// lock.SharedLocker): the nearest earlier incompatible request if there
// is one; otherwise, for an exclusive request its predecessor, for a
// shared one the nearest earlier exclusive request, and for a permit of
// limit n:
//
//   - the first waiter (position n: the n requests ahead of it hold the
//     permits) watches those n holders, since permits are released in any
//     order and the release of any of them admits it;
//   - a later waiter watches its predecessor only, and wakes when that
//     record is deleted or touched (see [WaitsForTouch] and [Touches]):
//     its predecessor touches its record when it is admitted, which is
//     when the waiter behind it becomes the first waiter.
//
// So every holder of a semaphore is watched by one waiter, the first, and
// every later waiter by the one behind it. A request leaving from further
// ahead than what a waiter watches shifts the waiter and what it watches
// together, or, if the waiter watched its predecessor, makes the
// predecessor the first waiter or admits it (and it touches), so what a
// waiter that was not woken watches stays right.
func Watched(q []Request, i int) []int {
	r := q[i]
	for j := i - 1; j >= 0; j-- {
		if !compatible(q[j], r) {
			return []int{j}
		}
	}
	switch r.Kind {
	case Shared:
		for j := i - 1; j >= 0; j-- {
			if q[j].Kind == Exclusive {
				return []int{j}
			}
		}
	case Permit:
		// Every earlier request is a permit of the same limit, so the
		// waiters start at position Limit.
		if i == r.Limit {
			w := make([]int, 0, r.Limit)
			for j := range r.Limit {
				w = append(w, j)
			}
			return w
		}
	}
	return []int{i - 1}
}

// WaitsForTouch reports whether the request at position i of q, not
// admitted, wakes also when the record it watches is touched, and not
// only when it is deleted: it is a permit waiter behind another permit
// waiter (a later waiter, see [Watched]), which watches that predecessor.
// Every other waiter wakes on deletions only, and a backend may filter
// out the touches of the records it watches, or must at least not take
// one for a deletion.
func WaitsForTouch(q []Request, i int) bool {
	r := q[i]
	if r.Kind != Permit || i <= r.Limit {
		return false
	}
	for _, e := range q[:i] {
		if !compatible(e, r) {
			return false
		}
	}
	return true
}

// AdmittedByDeletion reports whether the request at position i of q, not
// admitted, is admitted by the deletion of any one of the records
// [Watched] names: it is the first waiter of a semaphore, behind the
// limit holders it watches. No request can join the queue ahead of it, so
// a backend that sees one of those deletions may take the request as
// admitted without reading the queue again, and touch at once (see
// [Touches]): the read would only delay the wake-up of the waiter behind
// it, and so every admission after it.
func AdmittedByDeletion(q []Request, i int) bool {
	r := q[i]
	if r.Kind != Permit || i != r.Limit {
		return false
	}
	for _, e := range q[:i] {
		if !compatible(e, r) {
			return false
		}
	}
	return true
}

// AdmittedWithout reports whether the request at position i of q, not
// admitted, is admitted once the earlier record at position j goes and
// nothing else changes. No request can join a queue ahead of a waiter,
// and admission only grows as records ahead of it go, so a waiter that
// watched the record at j alone and sees it deleted knows that it is
// admitted if its own record is still there, without reading the queue
// again: a lock's waiter right behind the holder, a reader whose nearest
// earlier writer was the head of the queue.
func AdmittedWithout(q []Request, i, j int) bool {
	if j < 0 || j >= i || i >= len(q) {
		return false
	}
	rest := make([]Request, 0, i)
	rest = append(rest, q[:j]...)
	rest = append(rest, q[j+1:i+1]...)
	return Admitted(rest, i-1)
}

// Touches reports whether the request at position i of q, just admitted,
// must touch its record before its grant: rewrite it unchanged (same
// value, same token), so that the waiter behind it, which may have seen
// it waiting and then watched it alone (see [Watched]), wakes and becomes
// the first waiter. It is a permit followed by a permit of the same
// limit. A backend may skip the touch when it knows that no listing of
// the queue can have shown the request waiting: when it was admitted by
// the listing made with its creation, or when no record of the name was
// deleted since it was created; nobody can have watched it then, since
// admission only grows as records ahead go. A request that may have been
// seen waiting and does not touch leaves its successor watching the
// wrong record until it goes.
func Touches(q []Request, i int) bool {
	return q[i].Kind == Permit && i+1 < len(q) && q[i+1] == q[i]
}
