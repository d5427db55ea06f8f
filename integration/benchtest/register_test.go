package benchtest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencing"
)

// grantKind is what a grant allows its holder next to other holders.
type grantKind int

const (
	exclusive grantKind = iota // a lock, or a read-write lock's writer: alone
	shared                     // a read-write lock's reader: with readers, never with a writer
	permit                     // a semaphore permit: with at most limit-1 others
)

func (k grantKind) String() string {
	switch k {
	case shared:
		return "shared"
	case permit:
		return "permit"
	}
	return "exclusive"
}

// register is the in-process resource that the clients of one benchmark
// row protect with the lock they measure. A client enters it when its
// acquire returns, stays inside for the whole hold, and leaves just before
// it calls release; an entry the grant's kind does not allow next to the
// holders inside (an overlap), or one with a stale fencing token, is a
// violation, and err reports them once the row is over. It is safe for
// concurrent use.
//
// Exclusive grants enter through a fencing.Guard, as a write to a fenced
// resource would: a token lower than the highest accepted for the name is
// refused, and so is the same token again (package lock promises a token
// strictly greater than every earlier grant's). A reader's token must
// exceed every writer's before it. Permits, and readers among themselves,
// are checked by occupancy only: their tokens order their requests but
// grants observed at once may enter in any order (see "Shared grants and
// semaphore permits" in package fencing).
//
// The reference recipes, the floor and the herd baseline have no tokens:
// their grants enter with token 0 and take the next number of a counter of
// the register instead, under the same lock as the occupancy check. That
// number can never be stale, so for them only the occupancy check can
// fail; it is taken so that every recipe's critical section does the same
// work. In a mixed row (fencelock and the reference on one lock), whose
// counter would be out of step with the tokens, those grants are checked
// by occupancy only.
type register struct {
	row   string // the row, for the messages: recipe, clients, hold
	limit int    // permits at once on a semaphore row, 0 otherwise
	mixed bool   // grants without a token meet grants with one
	start time.Time
	guard fencing.Guard // exclusive grants' tokens, per name

	mu         sync.Mutex
	seq        fencing.Token // the last number given to a grant without a token
	names      map[string]*registerSlot
	violations int
	first      []string // the first maxReported violations
	maxInside  int      // most holders of one name at once
}

// registerSlot is the state of one name in a register.
type registerSlot struct {
	inside        map[int]registerHolder // by client
	lastExclusive registerHolder         // the exclusive grant that entered last
	maxShared     registerHolder         // the shared grant with the highest token so far
}

// registerHolder is one grant that has entered the register.
type registerHolder struct {
	client int
	kind   grantKind
	token  fencing.Token
	at     time.Duration // since the register was made
}

func (h registerHolder) String() string {
	return fmt.Sprintf("client %d (%s, token %d, entered at +%.3fs)", h.client, h.kind, h.token, h.at.Seconds())
}

// maxReported bounds the violations err spells out; it counts them all.
const maxReported = 5

// newRegister returns an empty register for row; limit is the
// semaphore's on a semaphore row, and 0 otherwise.
func newRegister(row string, limit int) *register {
	return &register{row: row, limit: limit, start: time.Now(), names: map[string]*registerSlot{}}
}

// enter marks client inside name with a grant of kind k carrying tok (0
// for recipes without tokens), and records a violation if the grant is
// not allowed next to the holders already inside or its token is stale.
// The client is marked inside either way, so that later entries are
// checked against what the lock actually let in.
func (r *register) enter(name string, client int, k grantKind, tok fencing.Token) {
	at := time.Since(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.names[name]
	if s == nil {
		s = &registerSlot{inside: map[int]registerHolder{}}
		r.names[name] = s
	}
	untokened := tok == 0
	if untokened {
		r.seq++
		tok = r.seq
	}
	h := registerHolder{client: client, kind: k, token: tok, at: at}
	if untokened && r.mixed {
		h.token = 0 // never compared: see register
	} else if err := r.tokenCheck(name, s, h); err != nil {
		r.violate("client %d entered %q at +%.3fs (%s, token %d): %v", client, name, at.Seconds(), k, tok, err)
	}
	if others := r.conflicts(s, client, k); len(others) > 0 {
		r.violate("client %d entered %q at +%.3fs (%s, token %d) while inside: %s", client, name, at.Seconds(), k, tok, strings.Join(others, ", "))
	}
	s.inside[client] = h
	r.maxInside = max(r.maxInside, len(s.inside))
}

// conflicts describes the holders inside s that a grant of kind k to
// client may not join, in client order, the first maxNamed of them as
// "client 3 (exclusive, ...)": every holder for a full semaphore, none if
// the entry is allowed. A client already inside conflicts with itself: it
// must leave before it enters again.
func (r *register) conflicts(s *registerSlot, client int, k grantKind) []string {
	full := k == permit && len(s.inside) >= r.limit
	var out []string
	n := 0
	for _, c := range slices.Sorted(maps.Keys(s.inside)) {
		other := s.inside[c]
		if !full && c != client && k != exclusive && other.kind != exclusive {
			continue
		}
		if n++; n <= maxNamed {
			out = append(out, other.String())
		}
	}
	if n > maxNamed {
		out = append(out, fmt.Sprintf("and %d more", n-maxNamed))
	}
	return out
}

// maxNamed bounds the holders a violation names: a recipe that does not
// lock at all has every client inside.
const maxNamed = 3

// tokenCheck checks h's token against the earlier grants of s. Exclusive
// grants pass through the Guard, whose critical section records the
// token; the caller holds r.mu, so the checks and the entry are one step.
func (r *register) tokenCheck(name string, s *registerSlot, h registerHolder) error {
	switch h.kind {
	case exclusive:
		if h.token <= s.maxShared.token {
			return fmt.Errorf("not above the token of an earlier shared grant: %v", s.maxShared)
		}
		err := r.guard.Apply(name, h.token, func() error {
			if h.token == s.lastExclusive.token {
				return fmt.Errorf("the token of the exclusive grant before it again: %v", s.lastExclusive)
			}
			s.lastExclusive = h
			return nil
		})
		if errors.Is(err, fencing.ErrStaleToken) {
			return fmt.Errorf("%w, from %v", err, s.lastExclusive)
		}
		return err
	case shared:
		if h.token > s.maxShared.token {
			s.maxShared = h
		}
		if hi := r.guard.Highest(name); h.token <= hi {
			return fmt.Errorf("not above the token of an earlier exclusive grant: %v", s.lastExclusive)
		}
	}
	return nil
}

// violate records one violation; the caller holds r.mu.
func (r *register) violate(format string, args ...any) {
	r.violations++
	if len(r.first) < maxReported {
		r.first = append(r.first, fmt.Sprintf(format, args...))
	}
}

// leave marks client outside name: its release is about to start.
func (r *register) leave(name string, client int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.names[name]; s != nil {
		delete(s.inside, client)
	}
}

// err describes the violations recorded so far, or returns nil if there
// were none.
func (r *register) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.violations == 0 {
		return nil
	}
	more := ""
	if n := r.violations - len(r.first); n > 0 {
		more = fmt.Sprintf("\n\t... and %d more", n)
	}
	noun := "violations"
	if r.violations == 1 {
		noun = "violation"
	}
	return fmt.Errorf("%s: %d %s of the exclusion, the limit or the token order; want 0:\n\t%s%s",
		r.row, r.violations, noun, strings.Join(r.first, "\n\t"), more)
}

// counts returns the number of violations and the most holders of one
// name seen inside at once.
func (r *register) counts() (violations, maxInside int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.violations, r.maxInside
}

// registerStep is one entry (or, with leave, one exit) in TestRegister.
type registerStep struct {
	leave  bool
	client int
	kind   grantKind
	token  fencing.Token
	name   string // "" is "lock"
}

func enterStep(client int, k grantKind, tok fencing.Token) registerStep {
	return registerStep{client: client, kind: k, token: tok}
}

func leaveStep(client int) registerStep { return registerStep{leave: true, client: client} }

// TestRegister feeds the register of the benchmark rows sequences that a
// working lock produces and sequences that a broken one would, and checks
// that it reports exactly the broken ones.
func TestRegister(t *testing.T) {
	tests := []struct {
		name  string
		limit int
		steps []registerStep
		want  []string // substrings of err; nil: no violation
	}{
		{"exclusive in turn", 0, []registerStep{enterStep(1, exclusive, 5), leaveStep(1), enterStep(2, exclusive, 9), leaveStep(2), enterStep(1, exclusive, 12)}, nil},
		{"exclusive overlap", 0, []registerStep{enterStep(1, exclusive, 5), enterStep(2, exclusive, 9)},
			[]string{"1 violation of", "client 2 entered \"lock\"", "exclusive, token 9", "while inside: client 1 (exclusive, token 5"}},
		{"stale token", 0, []registerStep{enterStep(1, exclusive, 9), leaveStep(1), enterStep(2, exclusive, 5)}, []string{"client 2", "stale token 5", "highest accepted is 9, from client 1 (exclusive, token 9"}},
		{"token again", 0, []registerStep{enterStep(1, exclusive, 9), leaveStep(1), enterStep(2, exclusive, 9)}, []string{"client 2", "the exclusive grant before it again: client 1 (exclusive, token 9"}},
		{"no tokens in turn", 0, []registerStep{enterStep(1, exclusive, 0), leaveStep(1), enterStep(2, exclusive, 0), leaveStep(2), enterStep(1, exclusive, 0)}, nil},
		{"no tokens overlap", 0, []registerStep{enterStep(1, exclusive, 0), enterStep(2, exclusive, 0)}, []string{"client 2", "while inside: client 1 (exclusive"}},
		{"entered twice", 0, []registerStep{enterStep(1, exclusive, 3), enterStep(1, exclusive, 4)}, []string{"client 1 entered", "while inside: client 1 (exclusive, token 3"}},
		{"readers together", 0, []registerStep{enterStep(1, shared, 4), enterStep(2, shared, 3), enterStep(3, shared, 5), leaveStep(1), leaveStep(2), leaveStep(3), enterStep(4, exclusive, 6)}, nil},
		{"writer among readers", 0, []registerStep{enterStep(1, shared, 4), enterStep(2, exclusive, 5)}, []string{"client 2", "exclusive, token 5", "while inside: client 1 (shared"}},
		{"reader beside writer", 0, []registerStep{enterStep(1, exclusive, 4), enterStep(2, shared, 5)}, []string{"client 2", "shared, token 5", "while inside: client 1 (exclusive"}},
		{"reader below writer", 0, []registerStep{enterStep(1, exclusive, 7), leaveStep(1), enterStep(2, shared, 5)}, []string{"client 2", "not above the token of an earlier exclusive grant: client 1 (exclusive, token 7"}},
		{"writer below reader", 0, []registerStep{enterStep(1, shared, 7), leaveStep(1), enterStep(2, exclusive, 6)}, []string{"client 2", "not above the token of an earlier shared grant: client 1 (shared, token 7"}},
		{"permits up to the limit", 2, []registerStep{enterStep(1, permit, 5), enterStep(2, permit, 4), leaveStep(1), enterStep(3, permit, 6)}, nil},
		{"permits beyond the limit", 2, []registerStep{enterStep(1, permit, 5), enterStep(2, permit, 4), enterStep(3, permit, 6)}, []string{"1 violation of", "client 3", "permit, token 6", "while inside: client 1 (permit, token 5", ", client 2 (permit, token 4"}},
		{"two names", 0, []registerStep{enterStep(1, exclusive, 5), {client: 2, kind: exclusive, token: 6, name: "other"}}, nil},
		{"many violations", 0, []registerStep{enterStep(0, exclusive, 0), enterStep(1, exclusive, 0), enterStep(2, exclusive, 0), enterStep(3, exclusive, 0), enterStep(4, exclusive, 0), enterStep(5, exclusive, 0), enterStep(6, exclusive, 0)},
			[]string{"6 violations", "client 5 entered \"lock\"", "client 2 (exclusive, token 3, entered at", ", and 2 more\n", "... and 1 more"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRegister("test row", tt.limit)
			for _, s := range tt.steps {
				name := s.name
				if name == "" {
					name = "lock"
				}
				if s.leave {
					r.leave(name, s.client)
				} else {
					r.enter(name, s.client, s.kind, s.token)
				}
			}
			err := r.err()
			if tt.want == nil {
				if err != nil {
					t.Errorf("err() = %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("err() = nil; want a violation")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err() = %v; want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestRegisterConcurrent runs clients that skip the lock through one
// register, as a broken recipe would, and checks that their overlaps are
// caught; and clients that take a real mutex, and checks that nothing is.
func TestRegisterConcurrent(t *testing.T) {
	for _, locked := range []bool{true, false} {
		t.Run(fmt.Sprintf("locked=%v", locked), func(t *testing.T) {
			r := newRegister("concurrent", 0)
			var (
				mu  sync.Mutex
				tok atomic.Uint64
				wg  sync.WaitGroup
			)
			// Every client waits for the others before its first entry,
			// so that without the mutex they are inside at once.
			var ready sync.WaitGroup
			ready.Add(8)
			for c := range 8 {
				wg.Go(func() {
					ready.Done()
					ready.Wait()
					for range 100 {
						if locked {
							mu.Lock()
						}
						r.enter("lock", c, exclusive, fencing.Token(tok.Add(1)))
						time.Sleep(10 * time.Microsecond)
						r.leave("lock", c)
						if locked {
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			n, most := r.counts()
			if locked && (n != 0 || most != 1) {
				t.Errorf("with a mutex: %d violations, at most %d inside (%v); want 0 and 1", n, most, r.err())
			}
			if !locked && (n == 0 || r.err() == nil) {
				t.Errorf("without a lock: %d violations, err() = %v; want some", n, r.err())
			}
		})
	}
}
