package faulttest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// faultLockDelay is the clients' lock-delay in TestFaultLockDelay: half
// the runs' TTL, far longer than a handoff and than the polling that
// times a record's disappearance, short enough to keep a run short.
const faultLockDelay = time.Second

// lockDelayScenarios are the crashes of TestFaultLockDelay: a holder that
// never releases, killed (SIGKILL) while the register applies its write,
// or frozen (SIGSTOP) after its read until its session has expired and
// another client has written.
var lockDelayScenarios = []scenario{
	{name: "kill-holder", inject: faultKillHolder},
	{name: "pause-holder", inject: faultPauseHolder},
}

// TestFaultLockDelay runs the holder crashes with a lock-delay on every
// client (WithLockDelay): besides every check of TestFault, the grant
// that follows the crashed holder's must come no sooner than the
// lock-delay after its record vanished from the servers (checkLockDelay),
// and the run must have seen the crash (the holder killed or frozen, its
// record there and then gone, a newer grant written). Then a control run:
// the same kill with clients that have no lock-delay, checked against
// one, must fail that check, or the check could not catch an early grant.
func TestFaultLockDelay(t *testing.T) {
	for _, kind := range backends {
		t.Run(string(kind), func(t *testing.T) {
			b := startBackend(t, kind)
			for _, sc := range lockDelayScenarios {
				t.Run(sc.name, func(t *testing.T) {
					cfg := defaultRun()
					cfg.lockDelay, cfg.checkDelay = faultLockDelay, faultLockDelay
					o := runScenario(t, b, sc, cfg, 1)
					t.Logf("%s", o.stats.line())
					for _, v := range o.violations {
						t.Errorf("violation: %s", v)
					}
					if o.faultErr != nil {
						t.Errorf("fault not confirmed: %v", o.faultErr)
					}
					if o.stats.WritesOK == 0 {
						t.Errorf("no write succeeded; want progress")
					}
					if o.stats.DelayedGrants != 1 {
						t.Errorf("%d grants checked against the lock-delay; want 1, the one after the crash", o.stats.DelayedGrants)
					}
				})
			}
			t.Run("control-no-lock-delay", func(t *testing.T) {
				cfg := defaultRun()
				cfg.checkDelay = faultLockDelay
				o := runScenario(t, b, lockDelayScenarios[0], cfg, 1)
				t.Logf("%s", o.stats.line())
				if o.faultErr != nil {
					t.Fatalf("fault not confirmed: %v", o.faultErr)
				}
				found := false
				for _, v := range o.violations {
					t.Logf("expected violation: %s", v)
					found = found || strings.Contains(v, "want at least the lock-delay")
				}
				if !found {
					t.Errorf("checkers found no early grant in a run without a lock-delay; want one (the check passed a grant that did not wait)")
				}
			})
		})
	}
}

// vanish is when a crashed holder's record disappeared from the servers:
// after lastSeen, the send time of the last listing that still showed it,
// and no later than goneAt, the answer to the first that did not.
type vanish struct {
	client           int
	token            uint64
	lastSeen, goneAt int64
}

// watchVanish lists, from now on, client p's records of the register's
// lock on the servers (p holds the lock with token tok, and has just been
// killed or frozen, so it creates no other) until none is left, and adds
// the vanish to the run. The function it returns waits for that and
// returns an error if the first listing did not show the record or it did
// not vanish within the run's timeout.
func (r *run) watchVanish(p *clientProc, tok uint64) func() error {
	done := make(chan error, 1)
	go func() {
		v := vanish{client: p.id, token: tok}
		for deadline := time.Now().Add(r.timeout()); ; {
			sent := r.now()
			keys, err := r.clientRecords(p.id, "register")
			switch {
			case err != nil:
			case len(keys) > 0:
				v.lastSeen = sent
			case v.lastSeen == 0:
				done <- fmt.Errorf("client %d (token %d): the first listing after the fault showed no record of it", p.id, tok)
				return
			default:
				v.goneAt = r.now()
				r.mu.Lock()
				r.vanished = append(r.vanished, v)
				r.mu.Unlock()
				done <- nil
				return
			}
			if time.Now().After(deadline) {
				done <- fmt.Errorf("client %d (token %d): its record was still there %v after the fault (last listing error: %v)", p.id, tok, r.timeout(), err)
				return
			}
			time.Sleep(5 * time.Millisecond) // polling, not ordering
		}
	}()
	return func() error { return <-done }
}

// watchVanishIfDelayed is watchVanish in a run that checks a lock-delay,
// and nil in the others.
func (r *run) watchVanishIfDelayed(p *clientProc, tok uint64) func() error {
	if r.cfg.checkDelay <= 0 {
		return nil
	}
	return r.watchVanish(p, tok)
}

// awaitVanish, deferred by a fault, waits for the watchVanish that *wait
// holds, if any, and makes its error the fault's when the fault has none.
func (r *run) awaitVanish(wait *func() error, err *error) {
	if *wait == nil {
		return
	}
	if verr := (*wait)(); verr != nil && *err == nil {
		*err = verr
	}
}

// checkLockDelay checks, when the run requires a lock-delay, the grant
// that followed each crashed holder whose record vanished: the next grant
// of the lock (the lowest token above the holder's) must come no sooner
// than the lock-delay after the last listing that still showed the
// record. That listing was sent before the record went, so a grant sooner
// than that came sooner than the lock-delay after the record vanished,
// whenever exactly it did. A vanished record with no grant after it is a
// violation too: the delay was not checked.
func (h *history) checkLockDelay(st *stats) []string {
	if h.lockDelay <= 0 {
		return nil
	}
	var bad []string
	for _, v := range h.vanished {
		var next event
		for _, evs := range h.clients {
			for _, e := range evs {
				if e.Kind == "acq-ok" && e.Token > v.token && (next.Token == 0 || e.Token < next.Token) {
					next = e
				}
			}
		}
		if next.Token == 0 {
			bad = append(bad, fmt.Sprintf("no grant followed client %d's (token %d) record, which vanished between %v and %v: the lock-delay was not checked",
				v.client, v.token, ms(v.lastSeen), ms(v.goneAt)))
			continue
		}
		low, high := time.Duration(next.T-v.goneAt), time.Duration(next.T-v.lastSeen)
		if st.DelayedGrants == 0 {
			st.DelayLow, st.DelayHigh = low, high
		}
		st.DelayLow, st.DelayHigh = min(st.DelayLow, low), min(st.DelayHigh, high)
		st.DelayedGrants++
		if high < h.lockDelay {
			bad = append(bad, fmt.Sprintf("client %d was granted the lock (token %d) at %v, %v after the last listing that still showed crashed client %d's record (token %d); want at least the lock-delay %v",
				next.Client, next.Token, ms(next.T), high, v.client, v.token, h.lockDelay))
		}
	}
	return bad
}
