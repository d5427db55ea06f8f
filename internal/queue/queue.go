// Package queue holds the rules every backend applies to a name's queue of
// requests (documented on lock.SharedLocker, in full in
// docs/design/queue.md): which kinds of request may share a queue, which
// are admitted, which records a waiter watches, which admitted requests
// touch their record to wake the waiter behind them, and how a request's
// kind is written into its record's name.
package queue

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Kind is what a request asks for.
type Kind uint8

// String returns the kind's name in metrics and spans.
func (k Kind) String() string {
	if names := [...]string{"exclusive", "shared", "permit"}; int(k) < len(names) {
		return names[k]
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

// Request is one request of a queue: its kind and a permit's limit (else 0).
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
// exclusive request, "r" for a shared one, "s" and the limit in decimal
// for a permit. A tag never contains '~', '/' or '#'.
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
	switch tag {
	case "":
		return ExclusiveRequest, true
	case "r":
		return SharedRequest, true
	}
	rest, ok := strings.CutPrefix(tag, "s")
	if !ok || rest == "" || rest[0] < '1' || rest[0] > '9' {
		return Request{}, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n > MaxLimit {
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

// fits reports whether r is compatible with every request of q.
func fits(q []Request, r Request) bool {
	return !slices.ContainsFunc(q, func(e Request) bool { return !compatible(e, r) })
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
// order) is granted: no earlier incompatible request remains (a refused
// record still in the queue keeps it waiting), and for an exclusive
// request no earlier request, for a shared one no earlier exclusive one,
// for a permit of limit n fewer than n earlier ones. The admitted
// requests of any queue are a prefix of it.
func Admitted(q []Request, i int) bool {
	r := q[i]
	switch {
	case !fits(q[:i], r):
		return false
	case r.Kind == Shared:
		return !slices.ContainsFunc(q[:i], func(e Request) bool { return e.Kind == Exclusive })
	case r.Kind == Permit:
		return i < r.Limit
	}
	return i == 0
}

// Watched returns the positions in q of the records the request at
// position i, not admitted, watches: the nearest earlier incompatible
// request if any, else as docs/design/queue.md ("Herd-free waits") lists.
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
			w := make([]int, r.Limit)
			for j := range w {
				w[j] = j
			}
			return w
		}
	}
	return []int{i - 1}
}

// WaitsForTouch reports whether the request at position i of q, not
// admitted, wakes also when the record it watches is touched: a permit
// waiter behind another permit waiter. Every other waiter wakes on
// deletions only, and must not take a touch for a deletion.
func WaitsForTouch(q []Request, i int) bool {
	r := q[i]
	return r.Kind == Permit && i > r.Limit && fits(q[:i], r)
}

// AdmittedByDeletion reports whether the request at position i of q, not
// admitted, is admitted by the deletion of any one of the records
// [Watched] names (the first waiter of a semaphore).
func AdmittedByDeletion(q []Request, i int) bool {
	r := q[i]
	return r.Kind == Permit && i == r.Limit && fits(q[:i], r)
}

// Touches reports whether the request at position i of q, just admitted,
// must touch its record (rewrite it unchanged) before its grant, to wake
// the permit waiter of the same limit behind it. A backend may skip the
// touch only when no listing can have shown the request waiting
// (docs/design/queue.md).
func Touches(q []Request, i int) bool {
	return q[i].Kind == Permit && i+1 < len(q) && q[i+1] == q[i]
}
