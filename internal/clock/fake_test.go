package clock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/sentinel"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestFakeTimerFiresAtDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		advance time.Duration
		fired   bool
	}{
		{"one ns before", time.Second - 1, false},
		{"at", time.Second, true},
		{"one ns after", time.Second + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake(t0)
			tm := f.NewTimer(time.Second)
			f.Advance(tc.advance)
			select {
			case got := <-tm.C():
				if !tc.fired {
					t.Fatalf("timer fired at %v; want no fire", got)
				}
				if want := t0.Add(tc.advance); !got.Equal(want) {
					t.Errorf("fired with %v; want %v", got, want)
				}
			default:
				if tc.fired {
					t.Fatal("timer did not fire")
				}
			}
			if got, want := f.Now(), t0.Add(tc.advance); !got.Equal(want) {
				t.Errorf("Now() = %v; want %v", got, want)
			}
		})
	}
}

func TestFakeStopReset(t *testing.T) {
	f := NewFake(t0)
	a := f.NewTimer(2 * time.Second)
	b := f.NewTimer(time.Second)
	if got := f.Timers(); got != 2 {
		t.Fatalf("Timers() = %d; want 2", got)
	}
	if !a.Stop() {
		t.Error("Stop() of an armed timer = false; want true")
	}
	if a.Stop() {
		t.Error("second Stop() = true; want false")
	}
	if b.Reset(3*time.Second) != true {
		t.Error("Reset() of an armed timer = false; want true")
	}
	f.Advance(2 * time.Second)
	select {
	case <-b.C():
		t.Fatal("reset timer fired at its old deadline")
	default:
	}
	f.Advance(time.Second)
	if got := <-b.C(); !got.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("fired with %v; want %v", got, t0.Add(3*time.Second))
	}

	if f.Timers() != 0 {
		t.Errorf("Timers() = %d after all fired; want 0", f.Timers())
	}
}

func TestFakeWaitTimersAndZeroDuration(t *testing.T) {
	f := NewFake(t0)
	armed := make(chan struct{})
	go func() {
		f.WaitTimers(1)
		close(armed)
	}()
	tm := f.NewTimer(time.Minute)
	<-armed
	tm.Stop()
	z := f.NewTimer(0)
	select {
	case <-z.C():
	default:
		t.Fatal("NewTimer(0) did not fire at once")
	}
}

func TestRealClock(t *testing.T) {
	c := Real()
	if d := time.Since(c.Now()); d < 0 || d > time.Minute {
		t.Fatalf("Real().Now() is %v away from time.Now()", d)
	}
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
}

func TestSleep(t *testing.T) {
	open := make(chan struct{})
	shut := make(chan struct{})
	close(shut)
	errEnded := errors.New("session ended")
	endErr := func() error { return errEnded }
	cause := errors.New("caller gave up")
	done, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	for _, tt := range []struct {
		name           string
		ctx            context.Context
		d              time.Duration
		closing, ended <-chan struct{}
		want           error
	}{
		{"elapsed", context.Background(), time.Millisecond, open, open, nil},
		{"no wait", done, 0, shut, shut, nil},
		{"context ended", done, time.Hour, open, open, cause},
		{"closed", context.Background(), time.Hour, shut, open, sentinel.Closed},
		{"session ended", context.Background(), time.Hour, open, shut, errEnded},
	} {
		if err := Sleep(tt.ctx, tt.d, tt.closing, tt.ended, endErr); !errors.Is(err, tt.want) {
			t.Errorf("%s: Sleep() = %v; want %v", tt.name, err, tt.want)
		}
	}
}
