package leasestate

import (
	"errors"
	"sync"
	"testing"
)

func TestEndOnce(t *testing.T) {
	s := new(State)
	if err := s.Err(); err != nil {
		t.Fatalf("Err() of a held lease = %v; want nil", err)
	}
	first, second := errors.New("first"), errors.New("second")
	var wg sync.WaitGroup
	wins := make(chan error, 2)
	for _, err := range []error{first, second} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.End(err) {
				wins <- err
			}
		}()
	}
	wg.Wait()
	close(wins)
	var won []error
	for err := range wins {
		won = append(won, err)
	}
	if len(won) != 1 {
		t.Fatalf("End() returned true %d times; want once", len(won))
	}
	<-s.Done()
	if got := s.Err(); got != won[0] {
		t.Errorf("Err() = %v; want the winner's %v", got, won[0])
	}
	if s.End(errors.New("third")) {
		t.Error("End() after the end = true; want false")
	}
}

func TestBeginRelease(t *testing.T) {
	s := new(State)
	if s.Releasing() {
		t.Fatal("Releasing() of a new lease = true")
	}
	if err, first := s.BeginRelease(); err != nil || !first {
		t.Fatalf("BeginRelease() = %v, %v; want nil, true", err, first)
	}
	if !s.Releasing() {
		t.Error("Releasing() after BeginRelease = false")
	}
	if err, first := s.BeginRelease(); err != nil || first {
		t.Errorf("second BeginRelease() = %v, %v; want nil, false", err, first)
	}
	end := errors.New("released")
	s.End(end)
	if err, first := s.BeginRelease(); err != end || first {
		t.Errorf("BeginRelease() after the end = %v, %v; want %v, false", err, first, end)
	}
}

func TestEndNilPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("End(nil) did not panic")
		}
	}()
	new(State).End(nil)
}

func TestOnEnd(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")

	s := new(State)
	var got []error
	s.OnEnd(func(err error) {
		select {
		case <-s.Done():
		default:
			t.Error("OnEnd's function ran before Done was closed")
		}
		got = append(got, err)
	})
	if len(got) != 0 {
		t.Fatalf("OnEnd's function ran before the end: %v", got)
	}
	s.End(errA)
	s.End(errB)
	if len(got) != 1 || got[0] != errA {
		t.Errorf("OnEnd's function saw %v; want once, the first error %v", got, errA)
	}

	// Set after the end: called at once, with the error.
	ended := new(State)
	ended.End(errB)
	var late []error
	ended.OnEnd(func(err error) { late = append(late, err) })
	if len(late) != 1 || late[0] != errB {
		t.Errorf("OnEnd after the end saw %v; want once, %v", late, errB)
	}
}

func TestDone(t *testing.T) {
	var s State // the zero State is a held lease's
	d1, d2 := s.Done(), s.Done()
	if d1 != d2 {
		t.Error("Done() returned two channels before the end; want one")
	}
	select {
	case <-d1:
		t.Fatal("Done() closed while held")
	default:
	}
	s.End(errors.New("end"))
	select {
	case <-d1:
	default:
		t.Error("Done() from before the end not closed by End")
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done() after the end not closed")
	}

	// Ended before anyone asked: Done is closed all the same.
	var e State
	e.End(errors.New("end"))
	select {
	case <-e.Done():
	default:
		t.Error("Done() of a lease ended before its first Done call not closed")
	}
}

// TestDoneRace has Done and End race: whichever comes first, every
// channel Done returns is closed once End has returned.
func TestDoneRace(t *testing.T) {
	for range 100 {
		var s State
		chans := make(chan (<-chan struct{}), 4)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { chans <- s.Done() })
		}
		s.End(errors.New("end"))
		wg.Wait()
		close(chans)
		for c := range chans {
			select {
			case <-c:
			default:
				t.Fatal("a Done() channel is open after End")
			}
		}
	}
}

// TestLostAtRelease: a Release that finds the record gone turns the
// lease's error into the loss; nothing else can, and OnEnd is not called
// again.
func TestLostAtRelease(t *testing.T) {
	released, lost := errors.New("released"), errors.New("lost")

	var s State
	calls := 0
	s.OnEnd(func(error) { calls++ })
	if s.LostAtRelease(lost) {
		t.Error("LostAtRelease on a held lease = true; want false")
	}
	if _, first := s.BeginRelease(); !first {
		t.Fatal("BeginRelease() not first")
	}
	if s.LostAtRelease(lost) {
		t.Error("LostAtRelease before the Release ended the lease = true; want false")
	}
	s.End(released)
	if !s.LostAtRelease(lost) {
		t.Error("LostAtRelease after the Release ended the lease = false; want true")
	}
	if err := s.Err(); err != lost {
		t.Errorf("Err() = %v; want %v", err, lost)
	}
	if calls != 1 {
		t.Errorf("OnEnd's function called %d times; want once", calls)
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done() open after the end")
	}

	// A lease that ended without a Release keeps its error.
	var other State
	other.End(released)
	if other.LostAtRelease(lost) {
		t.Error("LostAtRelease on a lease its Release did not end = true; want false")
	}
	if err := other.Err(); err != released {
		t.Errorf("Err() = %v; want %v", err, released)
	}
}
