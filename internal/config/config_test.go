package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/sentinel"
	"github.com/fencelock/fencelock/internal/telemetry"
)

type opts struct {
	Common
	ttl time.Duration
}

type option func(*opts)

func withTTL(d time.Duration) option    { return func(o *opts) { o.ttl = d } }
func withIdentity(id string) option     { return func(o *opts) { o.SetIdentity(id) } }
func withLogger(l *slog.Logger) option  { return func(o *opts) { o.SetLogger(l) } }
func withMargin(d time.Duration) option { return func(o *opts) { o.SetLossMargin(d) } }
func withLockDelay(d time.Duration) option {
	return func(o *opts) { o.SetLockDelay(d) }
}
func withNamespace(p string) option {
	return func(o *opts) { o.SetNamespace("prefix", p) }
}

func TestApply(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name     string
		opts     []option
		wantErrs []string // substrings, in order; nil: no error
	}{
		{name: "defaults"},
		{name: "all good", opts: []option{withTTL(time.Second), withIdentity("me"), withLogger(logger), withMargin(time.Millisecond), withNamespace("/app/locks/")}},
		{name: "nil option", opts: []option{nil}, wantErrs: []string{"option 0: nil"}},
		{name: "empty identity", opts: []option{withIdentity("")}, wantErrs: []string{"identity: empty"}},
		{name: "nil logger", opts: []option{withLogger(nil)}, wantErrs: []string{"logger: nil"}},
		{name: "zero logger", opts: []option{withLogger(&slog.Logger{})}, wantErrs: []string{"logger: nil"}},
		{name: "zero margin", opts: []option{withMargin(0)}, wantErrs: []string{"loss margin 0s: must be positive"}},
		{name: "lock delay", opts: []option{withLockDelay(time.Second)}},
		{name: "zero lock delay", opts: []option{withLockDelay(0)}, wantErrs: []string{"lock delay 0s: must be positive"}},
		{name: "negative lock delay", opts: []option{withLockDelay(-time.Second)}, wantErrs: []string{"lock delay -1s: must be positive"}},
		{name: "bad namespace", opts: []option{withNamespace("a//b")}, wantErrs: []string{"prefix: namespace"}},
		{name: "every error", opts: []option{withIdentity("a\nb"), nil, withMargin(-1)}, wantErrs: []string{"control character", "option 1: nil", "loss margin -1ns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o opts
			err := Apply(&o, &o.Common, tc.opts)
			if tc.wantErrs == nil {
				if err != nil {
					t.Fatalf("Apply() = %v; want nil", err)
				}
				if o.Identity == "" || o.Logger == nil {
					t.Errorf("after Apply: Identity %q, Logger %v; want both set", o.Identity, o.Logger)
				}
				return
			}
			if !errors.Is(err, sentinel.InvalidConfig) {
				t.Fatalf("Apply() = %v; want an error wrapping ErrInvalidConfig", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("Apply() error spans lines: %q", msg)
			}
			if got := strings.Count(msg, sentinel.InvalidConfig.Error()); got != len(tc.wantErrs) {
				t.Errorf("Apply() = %q: %d errors; want %d", msg, got, len(tc.wantErrs))
			}
			rest := msg
			for _, want := range tc.wantErrs {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Fatalf("Apply() = %q; want %q (in order)", msg, want)
				}
				rest = rest[i+len(want):]
			}
		})
	}
}

func TestApplyKeepsGivenValues(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	var o opts
	if err := Apply(&o, &o.Common, []option{withIdentity("worker-1"), withLogger(logger), withMargin(3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if o.Identity != "worker-1" || o.Logger != logger || o.LossMargin != 3*time.Second {
		t.Errorf("Apply() kept %q, %p, %v; want worker-1, %p, 3s", o.Identity, o.Logger, o.LossMargin, logger)
	}
	var d opts
	if err := Apply[option](&d, &d.Common, nil); err != nil {
		t.Fatal(err)
	}
	if d.Logger != slog.Default() {
		t.Error("default logger is not slog.Default()")
	}
	if d.LossMargin != 0 {
		t.Errorf("default LossMargin = %v; want 0 (the backend's default)", d.LossMargin)
	}
}

func TestOutcomeAndEndReason(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want string
	}{
		{live, nil, telemetry.Granted},
		{live, fmt.Errorf("x: %w", sentinel.Locked), telemetry.Locked},
		{live, fmt.Errorf("x: %w", sentinel.Incompatible), telemetry.Locked},
		{done, errors.New("request failed"), telemetry.Cancelled},
		{live, fmt.Errorf("x: %w", context.DeadlineExceeded), telemetry.Cancelled},
		{live, fmt.Errorf("x: %w", sentinel.Closed), telemetry.Cancelled},
		{live, fmt.Errorf("x: %w", sentinel.Lost), telemetry.Lost},
		{live, errors.New("boom"), telemetry.Error},
	} {
		if got := Outcome(tc.ctx, tc.err); got != tc.want {
			t.Errorf("Outcome(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{sentinel.Released, ""},
		{fmt.Errorf("lease %q (token %d): %w", "a", 7, sentinel.Released), ""},
		{fmt.Errorf("lease: %w", telemetry.WithReason(telemetry.Expired, fmt.Errorf("%w: gone", sentinel.Lost))), telemetry.Expired},
		{telemetry.WithReason(telemetry.Closed, fmt.Errorf("%w: locker closed", sentinel.Released)), telemetry.Closed},
		{fmt.Errorf("%w: untagged", sentinel.Lost), telemetry.Deleted},
	} {
		if got := EndReason(tc.err); got != tc.want {
			t.Errorf("EndReason(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
	tagged := telemetry.WithReason(telemetry.Expired, sentinel.Lost)
	if tagged.Error() != sentinel.Lost.Error() || !errors.Is(tagged, sentinel.Lost) {
		t.Errorf("WithReason changed the error: %q, errors.Is(ErrLost) = %v", tagged, errors.Is(tagged, sentinel.Lost))
	}
}
