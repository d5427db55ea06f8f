// Package leasestate holds the end-once state every backend's lease keeps:
// Done closes exactly once, Err is nil until then and changes after only
// as LostAtRelease says, and a Release that has begun is told apart from
// one that has not.
package leasestate

import "sync"

// State is the end-once state of one lease, safe for concurrent use. The
// zero State is that of a held lease; a State must not be copied.
type State struct {
	mu        sync.Mutex
	done      chan struct{} // nil until Done is called while the lease is held
	err       error
	releasing bool
	onEnd     func(error)
}

// closed is the Done channel of every lease that ended before its Done was
// first called, and of a nil or zero lease.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Closed returns a closed channel, the Done channel of a nil or zero
// lease of a backend: such a lease holds nothing, so it has already ended.
func Closed() <-chan struct{} { return closed }

// Done returns the channel closed when the lease ends. Every call before
// the end returns the same channel.
func (s *State) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		if s.err != nil {
			return closed
		}
		s.done = make(chan struct{})
	}
	return s.done
}

// Err returns nil while the lease is held, then the error it ended with.
func (s *State) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// End ends the lease with err, which must not be nil, and reports whether
// this call ended it: only the first call records its error and closes
// Done. Err returns err before Done is closed, so a reader woken by Done
// always sees it.
func (s *State) End(err error) bool {
	if err == nil {
		panic("leasestate: End(nil)") // a backend bug, never a user's input
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	s.err = err
	done, f := s.done, s.onEnd
	s.mu.Unlock()
	if done != nil {
		close(done)
	}
	if f != nil {
		f(err)
	}
	return true
}

// LostAtRelease replaces with err, a loss, the error of a lease its
// Release ended (whose delete found the record gone), and reports whether
// it did. Done stays closed, and OnEnd's function is not called again.
func (s *State) LostAtRelease(err error) bool {
	if err == nil {
		panic("leasestate: LostAtRelease(nil)") // a backend bug, never a user's input
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.releasing || s.err == nil {
		return false
	}
	s.err = err
	return true
}

// OnEnd arranges for f to be called once, with the lease's error, when
// the lease ends: by End, after Done is closed, or at once if the lease
// has already ended. Only one f may be set.
func (s *State) OnEnd(f func(error)) {
	s.mu.Lock()
	err := s.err
	if err == nil {
		s.onEnd = f
	}
	s.mu.Unlock()
	if err != nil {
		f(err)
	}
}

// BeginRelease marks the lease as being released. It returns the lease's
// error and false if the lease has already ended, nil and false if a
// release has already begun, and nil and true if this call began it.
func (s *State) BeginRelease() (ended error, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return s.err, false
	case s.releasing:
		return nil, false
	}
	s.releasing = true
	return nil, true
}

// Releasing reports whether a release has begun.
func (s *State) Releasing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.releasing
}
