package fencing_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// write is one Apply call in a table test.
type write struct {
	resource string
	token    fencing.Token
	fail     bool          // fn returns errWrite
	want     fencing.Token // 0: accepted; otherwise rejected as stale with this Highest
}

var errWrite = errors.New("write failed")

func TestGuardApply(t *testing.T) {
	tests := []struct {
		name   string
		writes []write
	}{
		{"rising tokens", []write{{"r", 1, false, 0}, {"r", 2, false, 0}, {"r", 9, false, 0}}},
		{"equal token accepted", []write{{"r", 5, false, 0}, {"r", 5, false, 0}, {"r", 5, false, 0}}},
		{"lower token rejected", []write{{"r", 8, false, 0}, {"r", 7, false, 8}, {"r", 8, false, 0}}},
		{"resources independent", []write{{"a", 8, false, 0}, {"b", 3, false, 0}, {"a", 3, false, 8}, {"b", 3, false, 0}}},
		{"failed write still fences", []write{{"r", 8, true, 0}, {"r", 7, false, 8}, {"r", 8, false, 0}}},
		{"empty resource name", []write{{"", 2, false, 0}, {"", 1, false, 2}}},
		{"largest token", []write{{"r", 1<<64 - 1, false, 0}, {"r", 1<<64 - 2, false, 1<<64 - 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g fencing.Guard
			for i, w := range tt.writes {
				ran := false
				err := g.Apply(w.resource, w.token, func() error {
					ran = true
					if w.fail {
						return errWrite
					}
					return nil
				})
				if w.want == 0 {
					wantErr := error(nil)
					if w.fail {
						wantErr = errWrite
					}
					if err != wantErr || !ran {
						t.Fatalf("write %d: Apply(%q, %d) = %v, ran %v; want %v, ran true", i, w.resource, w.token, err, ran, wantErr)
					}
					continue
				}
				var stale *fencing.StaleTokenError
				if !errors.As(err, &stale) || ran {
					t.Fatalf("write %d: Apply(%q, %d) = %v, ran %v; want *StaleTokenError, not run", i, w.resource, w.token, err, ran)
				}
				want := fencing.StaleTokenError{Resource: w.resource, Token: w.token, Highest: w.want}
				if *stale != want {
					t.Errorf("write %d: Apply(%q, %d) = %+v; want %+v", i, w.resource, w.token, *stale, want)
				}
				if !errors.Is(err, fencing.ErrStaleToken) {
					t.Errorf("write %d: errors.Is(%v, ErrStaleToken) = false; want true", i, err)
				}
			}
		})
	}
}

func TestGuardBadInput(t *testing.T) {
	var g fencing.Guard
	ran := false
	if err := g.Apply("r", 0, func() error { ran = true; return nil }); !errors.Is(err, fencing.ErrInvalidToken) || ran {
		t.Errorf("Apply(token 0) = %v, ran %v; want ErrInvalidToken, not run", err, ran)
	}
	if err := g.Apply("r", 1, nil); !errors.Is(err, fencing.ErrInvalidConfig) {
		t.Errorf("Apply(nil fn) = %v; want ErrInvalidConfig", err)
	}
	if h := g.Highest("r"); h != 0 {
		t.Errorf("Highest after rejected calls = %d; want 0", h)
	}
	for _, n := range []int{0, -1} {
		if g, err := fencing.NewGuard(n); !errors.Is(err, fencing.ErrInvalidConfig) || g != nil {
			t.Errorf("NewGuard(%d) = %v, %v; want nil, ErrInvalidConfig", n, g, err)
		}
	}
}

func TestGuardPanicStillFences(t *testing.T) {
	var g fencing.Guard
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recover() = %v; want boom", r)
			}
		}()
		_ = g.Apply("r", 4, func() error { panic("boom") })
	}()
	if err := g.Apply("r", 3, func() error { return nil }); !errors.Is(err, fencing.ErrStaleToken) {
		t.Errorf("Apply(3) after panicking Apply(4) = %v; want ErrStaleToken", err)
	}
	// The critical section was released by the panic.
	if err := g.Apply("r", 4, func() error { return nil }); err != nil {
		t.Errorf("Apply(4) after panic = %v; want nil", err)
	}
}

func TestGuardEviction(t *testing.T) {
	g, err := fencing.NewGuard(2)
	if err != nil {
		t.Fatalf("NewGuard(2) = %v", err)
	}
	ok := func() error { return nil }
	for i, w := range []struct {
		resource string
		token    fencing.Token
	}{{"a", 10}, {"b", 20}, {"c", 30}} {
		if err := g.Apply(w.resource, w.token, ok); err != nil {
			t.Fatalf("write %d: Apply(%q, %d) = %v; want nil", i, w.resource, w.token, err)
		}
	}
	if n := g.Len(); n != 2 {
		t.Fatalf("Len() = %d; want 2", n)
	}
	// "a" was least recently used: evicted, its 10 became the floor.
	if h := g.Highest("a"); h != 10 {
		t.Errorf("Highest(evicted a) = %d; want floor 10", h)
	}
	err = g.Apply("a", 9, ok)
	var stale *fencing.StaleTokenError
	if !errors.As(err, &stale) || stale.Highest != 10 {
		t.Errorf("Apply(evicted a, 9) = %v; want stale with Highest 10", err)
	}
	// Equal to its own highest: accepted, and "b" is evicted to make room.
	if err := g.Apply("a", 10, ok); err != nil {
		t.Errorf("Apply(evicted a, 10) = %v; want nil", err)
	}
	// The floor (now 20) also holds back a resource it never saw: the
	// liveness price of bounded memory.
	if err := g.Apply("new", 15, ok); !errors.Is(err, fencing.ErrStaleToken) {
		t.Errorf("Apply(new, 15) with floor 20 = %v; want ErrStaleToken", err)
	}
	if n := g.Len(); n != 2 {
		t.Errorf("Len() = %d; want 2", n)
	}
}

// TestGuardInUseNotEvicted holds a resource inside Apply while others force
// evictions: the held resource keeps its own highest token, and the Guard
// shrinks back to its limit once the call ends.
func TestGuardInUseNotEvicted(t *testing.T) {
	g, err := fencing.NewGuard(1)
	if err != nil {
		t.Fatalf("NewGuard(1) = %v", err)
	}
	entered, proceed := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- g.Apply("held", 3, func() error { close(entered); <-proceed; return nil })
	}()
	<-entered
	for i := range 5 {
		r := "other" + strconv.Itoa(i)
		if err := g.Apply(r, 100, func() error { return nil }); err != nil {
			t.Fatalf("Apply(%q, 100) = %v; want nil", r, err)
		}
	}
	if h := g.Highest("held"); h != 3 {
		t.Errorf("Highest(held) while in use = %d; want 3", h)
	}
	if h := g.Highest("other4"); h != 100 {
		t.Errorf("Highest(other4) = %d; want 100 (evicted into the floor)", h)
	}
	if n := g.Len(); n != 1 {
		t.Errorf("Len() while one resource is in use = %d; want 1", n)
	}
	close(proceed)
	if err := <-done; err != nil {
		t.Fatalf("Apply(held) = %v; want nil", err)
	}
	if h := g.Highest("held"); h != 3 {
		t.Errorf("Highest(held) after the call = %d; want 3", h)
	}
}

// TestCheckThenWriteControl shows the race the Guard exists to close: with a
// separate check and write, "check 7, check 8, write 8, write 7" lands the
// stale write last. The same schedule through Guard.Apply cannot happen.
func TestCheckThenWriteControl(t *testing.T) {
	var (
		mu       sync.Mutex
		highest  fencing.Token
		register fencing.Token // the protected value: who wrote last
	)
	check := func(tok fencing.Token) bool {
		mu.Lock()
		defer mu.Unlock()
		if tok < highest {
			return false
		}
		highest = tok
		return true
	}
	write := func(tok fencing.Token) { mu.Lock(); register = tok; mu.Unlock() }

	checked7, wrote8 := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // paused holder, token 7
		if check(7) {
			close(checked7)
			<-wrote8
			write(7)
		}
	})
	<-checked7
	if check(8) {
		write(8)
	}
	close(wrote8)
	wg.Wait()
	if register != 7 {
		t.Fatalf("check-then-write control: register = %d; want 7 (the stale write lands)", register)
	}

	// Through the Guard, token 7's write either lands before 8's check or
	// is rejected; the register ends at 8 whichever order the two take.
	var g fencing.Guard
	register = 0
	entered7 := make(chan struct{})
	release7 := make(chan struct{})
	wg.Go(func() {
		_ = g.Apply("reg", 7, func() error { close(entered7); <-release7; write(7); return nil })
	})
	<-entered7
	done8 := make(chan error, 1)
	go func() { done8 <- g.Apply("reg", 8, func() error { write(8); return nil }) }()
	close(release7) // 8 is waiting on the critical section, or about to
	wg.Wait()
	if err := <-done8; err != nil {
		t.Fatalf("Apply(8) = %v; want nil", err)
	}
	if err := g.Apply("reg", 7, func() error { write(7); return nil }); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("late Apply(7) = %v; want ErrStaleToken", err)
	}
	if register != 8 {
		t.Fatalf("guarded: register = %d; want 8", register)
	}
}

// TestGuardConcurrent runs many writers with tokens from a shared grant
// counter, some fresh and some stale, and checks the order in which writes
// were applied: per resource, never a token lower than one applied before it,
// never two writes inside the critical section at once, and every rejection
// justified by an earlier accepted token.
//
// A stale write needs a writer to hold an old grant while a newer one
// writes first. Left to the scheduler that need not happen: on a busy
// machine each writer can run its whole loop before the next one starts,
// every grant is then newer than all earlier writes, and nothing is
// rejected. So the schedule is built instead: every writer takes its first
// grant, then waits; a newer grant writes every resource; only then do the
// writers start, each with its old grant for its first write. That write is
// stale whatever the order, and the write made with the last grant of all
// cannot be, so both paths run in every run.
func TestGuardConcurrent(t *testing.T) {
	const (
		writers   = 32
		perWriter = 300
		resources = 4
	)
	for _, limit := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
			g := &fencing.Guard{}
			if limit > 0 {
				var err error
				if g, err = fencing.NewGuard(limit); err != nil {
					t.Fatalf("NewGuard(%d) = %v", limit, err)
				}
			}
			var grants atomic.Uint64
			type log struct {
				mu       sync.Mutex
				applied  []fencing.Token
				inside   atomic.Int32
				overlaps atomic.Int32
			}
			logs := make([]*log, resources)
			for i := range logs {
				logs[i] = &log{}
			}
			apply := func(r int, tok fencing.Token) error {
				l := logs[r]
				return g.Apply("res"+strconv.Itoa(r), tok, func() error {
					if l.inside.Add(1) != 1 {
						l.overlaps.Add(1)
					}
					l.mu.Lock()
					l.applied = append(l.applied, tok)
					l.mu.Unlock()
					l.inside.Add(-1)
					return nil
				})
			}
			var (
				wg, ready sync.WaitGroup
				start     = make(chan struct{})
				errs      sync.Map
				rejected  atomic.Int64
			)
			ready.Add(writers)
			for w := range writers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					mine := fencing.Token(grants.Add(1))
					ready.Done()
					<-start
					for i := range perWriter {
						if i > 0 && rng.IntN(4) == 0 {
							mine = fencing.Token(grants.Add(1)) // a new grant
						}
						err := apply(rng.IntN(resources), mine)
						var stale *fencing.StaleTokenError
						switch {
						case err == nil:
						case errors.As(err, &stale) && stale.Highest > stale.Token && stale.Token == mine:
							rejected.Add(1)
						default:
							errs.Store(w, fmt.Sprintf("Apply(%d) = %v; want nil or stale with Highest > Token", mine, err))
						}
						if i == 0 && err == nil {
							errs.Store(w, fmt.Sprintf("first Apply(%d) = nil after a newer grant wrote every resource; want stale", mine))
						}
					}
				})
			}
			ready.Wait()
			newer := fencing.Token(grants.Add(1))
			for r := range resources {
				if err := apply(r, newer); err != nil {
					t.Fatalf("Apply(res%d, %d) before the writers started = %v; want nil", r, newer, err)
				}
			}
			close(start)
			wg.Wait()
			errs.Range(func(k, v any) bool { t.Errorf("writer %v: %v", k, v); return true })
			accepted := 0
			for r, l := range logs {
				if n := l.overlaps.Load(); n != 0 {
					t.Errorf("resource %d: %d writes overlapped inside the critical section; want 0", r, n)
				}
				for i := 1; i < len(l.applied); i++ {
					if l.applied[i] < l.applied[i-1] {
						t.Fatalf("resource %d: write %d applied token %d after %d; want non-decreasing", r, i, l.applied[i], l.applied[i-1])
					}
				}
				accepted += len(l.applied)
			}
			accepted -= resources // the newer grant's own writes
			if n := int(rejected.Load()); accepted+n != writers*perWriter {
				t.Errorf("writers: %d accepted + %d rejected; want %d writes in all", accepted, n, writers*perWriter)
			}
			if n := int(rejected.Load()); accepted == 0 || n < writers {
				t.Errorf("writers: %d accepted, %d rejected; want at least 1 accepted and at least %d (every first write) rejected", accepted, n, writers)
			}
			if limit > 0 && g.Len() > limit {
				t.Errorf("Len() = %d after all calls ended; want at most %d", g.Len(), limit)
			}
		})
	}
}

// FuzzGuard decodes the input into a limit and a list of writes, then checks
// the Guard twice: run one at a time against an exact model, and run as a
// schedule of concurrent writers whose writes are held open and released in
// the decoded order.
func FuzzGuard(f *testing.F) {
	f.Add([]byte{0, 7, 0, 8, 0x80, 7, 0x81, 8})
	f.Add([]byte{1, 1, 5, 2, 9, 3, 2, 0x41, 5, 0x82, 9})
	f.Add([]byte{2, 0xC0, 3, 0x40, 3, 0x01, 3, 0x80, 2})
	f.Add([]byte{3, 0, 0, 0x40, 4, 0x80, 0, 0xC0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 || len(data) > 257 {
			return
		}
		limit := int(data[0] % 4) // 0: the default limit
		type op struct {
			resource string
			token    fencing.Token // 0 is a bad token
			fail     bool
			hold     bool
		}
		var ops []op
		for i := 1; i+1 < len(data); i += 2 {
			b := data[i]
			ops = append(ops, op{
				resource: string(rune('a' + b&3)),
				token:    fencing.Token(data[i+1] & 0x1f),
				fail:     b&0x40 != 0,
				hold:     b&0x80 != 0,
			})
		}
		newGuard := func() *fencing.Guard {
			if limit == 0 {
				return &fencing.Guard{}
			}
			g, err := fencing.NewGuard(limit)
			if err != nil {
				t.Fatalf("NewGuard(%d) = %v", limit, err)
			}
			return g
		}

		// One at a time: the Guard never accepts what the exact model
		// rejects, and matches it exactly while nothing is evicted.
		g := newGuard()
		model := map[string]fencing.Token{}
		for i, o := range ops {
			ran := false
			err := g.Apply(o.resource, o.token, func() error {
				ran = true
				if o.fail {
					return errWrite
				}
				return nil
			})
			switch {
			case o.token == 0:
				if !errors.Is(err, fencing.ErrInvalidToken) || ran {
					t.Fatalf("op %d: Apply(%q, 0) = %v, ran %v; want ErrInvalidToken", i, o.resource, err, ran)
				}
				continue
			case ran:
				if o.token < model[o.resource] {
					t.Fatalf("op %d: Apply(%q, %d) ran with model highest %d; want rejected", i, o.resource, o.token, model[o.resource])
				}
				if (err != nil) != o.fail {
					t.Fatalf("op %d: Apply(%q, %d) = %v; want fn's error", i, o.resource, o.token, err)
				}
				model[o.resource] = o.token
			default:
				var stale *fencing.StaleTokenError
				if !errors.As(err, &stale) || stale.Token != o.token || stale.Highest <= o.token {
					t.Fatalf("op %d: Apply(%q, %d) = %v; want stale with Highest > %d", i, o.resource, o.token, err, o.token)
				}
				if limit == 0 && (o.token >= model[o.resource] || stale.Highest != model[o.resource]) {
					t.Fatalf("op %d: Apply(%q, %d) = %v without eviction; model highest %d", i, o.resource, o.token, err, model[o.resource])
				}
			}
		}

		// Concurrently: writers start in input order (each signals just
		// before its Apply, and the next starts only then); a write whose
		// op has the hold bit waits inside its critical section until
		// every writer has started, then the held ones are released in
		// input order. Per resource, applied tokens never decrease.
		g = newGuard()
		var mu sync.Mutex
		applied := map[string][]fencing.Token{}
		release := make([]chan struct{}, len(ops))
		var started atomic.Int32
		var early atomic.Int32 // held writes let go before every writer started
		var wg sync.WaitGroup
		for i, o := range ops {
			release[i] = make(chan struct{})
			if !o.hold {
				close(release[i])
			}
			running := make(chan struct{})
			wg.Go(func() {
				started.Add(1)
				close(running)
				_ = g.Apply(o.resource, o.token, func() error {
					mu.Lock()
					applied[o.resource] = append(applied[o.resource], o.token)
					mu.Unlock()
					<-release[i]
					if o.hold && int(started.Load()) != len(ops) {
						early.Add(1)
					}
					return nil
				})
			})
			<-running
		}
		// The barrier: each writer's start was awaited above, so every
		// writer has started before any held one is let go.
		for i, o := range ops {
			if o.hold {
				close(release[i])
			}
		}
		wg.Wait()
		if n := early.Load(); n != 0 {
			t.Fatalf("%d held writes were released before every writer had started; want none", n)
		}
		for r, toks := range applied {
			for i := 1; i < len(toks); i++ {
				if toks[i] < toks[i-1] {
					t.Fatalf("resource %q: applied %d after %d; want non-decreasing", r, toks[i], toks[i-1])
				}
			}
		}
	})
}

func BenchmarkGuardApply(b *testing.B) {
	ok := func() error { return nil }
	b.Run("one-resource", func(b *testing.B) {
		var g fencing.Guard
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := g.Apply("r", fencing.Token(i+1), ok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stale", func(b *testing.B) {
		var g fencing.Guard
		if err := g.Apply("r", 100, ok); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := g.Apply("r", 99, ok); err == nil {
				b.Fatal("stale write accepted")
			}
		}
	})
	b.Run("parallel-1024-resources", func(b *testing.B) {
		var g fencing.Guard
		names := make([]string, 1024)
		for i := range names {
			names[i] = "res" + strconv.Itoa(i)
		}
		var tok atomic.Uint64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(tok.Add(1)) * 7919
			for pb.Next() {
				i++
				_ = g.Apply(names[i%len(names)], fencing.Token(tok.Add(1)), ok)
			}
		})
	})
	b.Run("evicting", func(b *testing.B) {
		g, err := fencing.NewGuard(256)
		if err != nil {
			b.Fatal(err)
		}
		names := make([]string, 1024)
		for i := range names {
			names[i] = "res" + strconv.Itoa(i)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := g.Apply(names[i%len(names)], fencing.Token(i+1), ok); err != nil {
				b.Fatal(err)
			}
		}
	})
}
