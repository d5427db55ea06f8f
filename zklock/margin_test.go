package zklock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/lock"
)

// The default margin must cover the worst lag of the leader's view of a
// session behind the Locker's (a half tick, at most a quarter of a timeout
// of two ticks, plus the keepalive gap) and leave room for timer delay,
// and must leave two keepalive intervals before the deadline.
func TestDefaultMarginArithmetic(t *testing.T) {
	o, err := buildOptions(nil)
	if err != nil {
		t.Fatalf("buildOptions(nil) = %v", err)
	}
	for _, timeout := range []time.Duration{
		4 * time.Millisecond, // two ticks of 2ms
		400 * time.Millisecond,
		2 * time.Second,
		4 * time.Second, // the default server's minimum: two ticks of 2s
		10 * time.Second,
		40 * time.Second, // the default server's maximum: twenty ticks of 2s
		time.Hour,
	} {
		m := o.margin(timeout)
		halfTick := timeout / 4 // tickTime ≤ timeout/2
		gap := timeout / keepaliveFraction
		if lag := halfTick + gap; m <= lag {
			t.Errorf("margin(%v) = %v; want more than the lag bound %v", timeout, m, lag)
		}
		if slack := m - halfTick - gap; slack < timeout/7 {
			t.Errorf("margin(%v) = %v leaves %v over the lag bound; want at least a seventh of the timeout", timeout, m, slack)
		}
		if left := timeout - m; left < 2*gap {
			t.Errorf("margin(%v) = %v leaves %v to hear from the server; want at least two keepalive intervals (%v)", timeout, m, left, 2*gap)
		}
		if m != timeout/2 {
			t.Errorf("margin(%v) = %v; want %v", timeout, m, timeout/2)
		}
	}
}

func TestMarginClamp(t *testing.T) {
	tests := []struct {
		name      string
		margin    time.Duration // given to WithLossMargin; 0 for the default
		timeout   time.Duration // negotiated
		want      time.Duration
		clamped   bool
		dialError bool
	}{
		{"default", 0, 4 * time.Second, 2 * time.Second, false, false},
		{"within", 2 * time.Second, 3 * time.Second, 2 * time.Second, false, false},
		{"exactly a third", time.Second, 3 * time.Second, time.Second, false, false},
		{"just below a third", time.Second - time.Nanosecond, 3 * time.Second, time.Second, true, false},
		{"a tenth", 400 * time.Millisecond, 4 * time.Second, 4 * time.Second / 3, true, false},
		{"exactly five sixths", 5 * time.Second, 6 * time.Second, 5 * time.Second, false, false},
		{"just above five sixths", 5*time.Second + time.Nanosecond, 6 * time.Second, 5 * time.Second, true, true},
		{"negotiated equal to the margin", 4 * time.Second, 4 * time.Second, 4*time.Second - 2*(4*time.Second/12), true, true},
		{"negotiated below the margin", 4 * time.Second, 2 * time.Second, 2*time.Second - 2*(2*time.Second/12), true, true},
		{"negotiated longer than asked", time.Second, 20 * time.Second, 20 * time.Second / 3, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &options{}
			o.LossMargin = tt.margin
			got, why := o.clampMargin(tt.timeout)
			if got != tt.want || (why != "") != tt.clamped {
				t.Errorf("clampMargin(%v) with margin %v = %v, %q; want %v, clamped %t", tt.timeout, tt.margin, got, why, tt.want, tt.clamped)
			}
			if m := o.margin(tt.timeout); m != got {
				t.Errorf("margin(%v) = %v; want %v, as clampMargin", tt.timeout, m, got)
			}
			err := o.checkNegotiated(tt.timeout)
			if tt.dialError != (err != nil) {
				t.Errorf("checkNegotiated(%v) with margin %v = %v; want error %t", tt.timeout, tt.margin, err, tt.dialError)
			}
			if err != nil && !errors.Is(err, lock.ErrInvalidConfig) {
				t.Errorf("checkNegotiated(%v) = %v; want an error wrapping %v", tt.timeout, err, lock.ErrInvalidConfig)
			}
		})
	}
}

func TestMarginOption(t *testing.T) {
	tests := []struct {
		name    string
		opts    []Option
		wantErr bool
	}{
		{"five sixths of the timeout", []Option{WithSessionTimeout(6 * time.Second), WithLossMargin(5 * time.Second)}, false},
		{"above five sixths", []Option{WithSessionTimeout(6 * time.Second), WithLossMargin(5*time.Second + time.Millisecond)}, true},
		{"equal to the timeout", []Option{WithSessionTimeout(time.Second), WithLossMargin(time.Second)}, true},
		{"above the default timeout", []Option{WithLossMargin(DefaultSessionTimeout)}, true},
		{"small, raised later", []Option{WithLossMargin(time.Millisecond)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := buildOptions(tt.opts)
			if tt.wantErr != (err != nil) {
				t.Fatalf("buildOptions() = %v; want error %t", err, tt.wantErr)
			}
			if err != nil && (!errors.Is(err, lock.ErrInvalidConfig) || !strings.Contains(err.Error(), "loss margin")) {
				t.Errorf("buildOptions() = %v; want an error wrapping %v that names the loss margin", err, lock.ErrInvalidConfig)
			}
		})
	}
}
