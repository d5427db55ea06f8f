package fencingtest

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/fencing"
)

// TestSQLApplyAll: ApplyAll checks every token in one transaction; one
// stale token refuses the whole write and records none of them, and a
// failed write keeps them all.
func TestSQLApplyAll(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b)
		ctx := t.Context()
		applyAll := func(tokens map[string]fencing.Token, fail bool) (bool, error) {
			ran := false
			err := f.store.ApplyAll(ctx, tokens, func(tx *sql.Tx) error {
				ran = true
				for r, tok := range tokens {
					if err := f.put(ctx, tx, r, fmt.Sprint(tok), tok); err != nil {
						return err
					}
				}
				if fail {
					return errWrite
				}
				return nil
			})
			return ran, err
		}
		state := func(when string, values ...string) {
			t.Helper()
			for i, r := range []string{"a", "b"} {
				if v := f.value(t, r); v != values[2*i] {
					t.Errorf("%s: register %s = %q; want %q", when, r, v, values[2*i])
				}
				if h := fmt.Sprint(f.highest(t, r)); h != values[2*i+1] {
					t.Errorf("%s: Highest(%s) = %s; want %s", when, r, h, values[2*i+1])
				}
			}
		}
		if ran, err := applyAll(map[string]fencing.Token{"a": 5, "b": 7}, false); err != nil || !ran {
			t.Fatalf("ApplyAll(a:5, b:7) = %v, ran %v; want nil, ran", err, ran)
		}
		state("after a:5 b:7", "5", "5", "7", "7")

		if err := f.apply(ctx, "b", "9", 9); err != nil {
			t.Fatalf("Apply(b, 9) = %v", err)
		}
		ran, err := applyAll(map[string]fencing.Token{"a": 6, "b": 8}, false)
		wantStale(t, err, "b", 8, 9)
		if ran {
			t.Errorf("ApplyAll(a:6, b:8) ran the write; want it refused")
		}
		state("after the refused a:6 b:8", "5", "5", "9", "9")
		// Both stale: the first resource in sorted order reports.
		_, err = applyAll(map[string]fencing.Token{"b": 8, "a": 4}, false)
		wantStale(t, err, "a", 4, 5)

		if _, err := applyAll(map[string]fencing.Token{"a": 10, "b": 10}, true); !errors.Is(err, errWrite) {
			t.Fatalf("failing ApplyAll(a:10, b:10) = %v; want errWrite", err)
		}
		state("after the failed write a:10 b:10", "5", "10", "9", "10")
		if a, b := f.logged(t, "a"), f.logged(t, "b"); !slices.Equal(a, []fencing.Token{5}) || !slices.Equal(b, []fencing.Token{7, 9}) {
			t.Errorf("applied writes a %v, b %v; want [5], [7 9]", a, b)
		}
	})
}

// TestSQLApplyAllNoDeadlock runs writes over overlapping sets of resources
// concurrently, each writing its data rows in the reverse of sorted order:
// every one commits, because ApplyAll takes the token rows in sorted order
// and so serializes writers of a shared resource before their data rows.
// On PostgreSQL a check in map order would deadlock (SQLSTATE 40P01).
func TestSQLApplyAllNoDeadlock(t *testing.T) {
	const (
		writers   = 8
		perWriter = 20
	)
	sets := [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"a", "b", "c"}}
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b)
		ctx := t.Context()
		errs := make(chan error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range perWriter {
					set := sets[(w+i)%len(sets)]
					tokens := map[string]fencing.Token{}
					for _, r := range set {
						tokens[r] = 1
					}
					err := f.store.ApplyAll(ctx, tokens, func(tx *sql.Tx) error {
						for _, r := range slices.Backward(slices.Sorted(slices.Values(set))) {
							if err := f.put(ctx, tx, r, fmt.Sprintf("w%d", w), 1); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						errs <- fmt.Errorf("writer %d: ApplyAll(%q) = %v; want nil", w, set, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		total := 0
		for _, r := range []string{"a", "b", "c"} {
			total += len(f.logged(t, r))
		}
		want := 0
		for w := range writers {
			for i := range perWriter {
				want += len(sets[(w+i)%len(sets)])
			}
		}
		if total != want {
			t.Errorf("log holds %d writes; want %d", total, want)
		}
	})
}
