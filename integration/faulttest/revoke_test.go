package faulttest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fencelock/fencelock/etcdlock"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/integration/cluster"
	"github.com/fencelock/fencelock/lock"
	"github.com/fencelock/fencelock/zklock"
)

// revoker opens a Locker of the test's own on the run's namespace, for
// lock.Revoker, and returns it with the function that closes it.
func (r *run) revoker(ctx context.Context) (lock.Revoker, func(), error) {
	logger := slog.New(slog.DiscardHandler)
	var l lock.Locker
	switch r.b.kind {
	case cluster.Etcd:
		el, err := etcdlock.New(r.b.etcd, etcdlock.WithPrefix(r.ns), etcdlock.WithIdentity("faulttest-revoker"), etcdlock.WithLogger(logger))
		if err != nil {
			return nil, nil, fmt.Errorf("etcdlock.New() = %w", err)
		}
		l = el
	case cluster.ZooKeeper:
		zl, err := zklock.Dial(ctx, r.b.c.Endpoints(), zklock.WithRoot("/"+r.ns), zklock.WithIdentity("faulttest-revoker"), zklock.WithLogger(logger))
		if err != nil {
			return nil, nil, fmt.Errorf("zklock.Dial() = %w", err)
		}
		l = zl
	default:
		return nil, nil, fmt.Errorf("unknown backend %q", r.b.kind)
	}
	rv, ok := l.(lock.Revoker)
	if !ok {
		l.Close()
		return nil, nil, fmt.Errorf("%T is not a lock.Revoker", l)
	}
	return rv, func() { l.Close() }, nil
}

// faultRevokeHolder freezes the holder of the register's lock right after
// the register served its read (as faultPauseHolder does) and, while it
// is frozen, revokes its grant by token from the test process. It
// confirms that the revocation took (Revoke returned nil and the holder's
// record is gone from the server), that another client was granted the
// lock and wrote with a higher token while the holder was still frozen,
// and, once the holder is thawed, that its lease ended with ErrLost and a
// cause naming the deletion and that its write was refused as stale.
//
// An overlap of the holder's belief with a later grant after the thaw,
// until its Locker hears of the deletion, is the window lock.Revoker
// documents; the checker excuses it for a revoked grant, bounded by a TTL
// after the thaw, and still requires the holder's requests to be refused.
// On etcd the window includes the first 50ms of a grant, before its
// Locker watches the record.
//
// The lock is "register" in every workload but "multi": in "rw" its
// holder holds the write lock, in "semaphore" it also holds a permit,
// which the revocation leaves alone. In "multi" every name of the
// holder's grant is revoked, since the next holder of the name whose set
// it read may want the others too. The freeze is kept short (no settle): frozen for most of a
// TTL, the holder would also find its session expired when it wakes, and
// its lease's cause would then be the expiry, not the revocation.
func faultRevokeHolder(r *run) error {
	var target *clientProc
	var ferr error
	e, err := r.nextAccepted(isRead, func(e serverEvent) {
		target = r.client(e.Client)
		// Thawed, the holder keeps the lease until its Done closes
		// instead of releasing it first: the release would find the
		// record gone and end the lease as released, hiding whether the
		// holder heard of the revocation.
		r.reg.holdLonger(e.Client, longHold(r))
		ferr = r.freeze(target)
	})
	if err != nil {
		return err
	}
	if ferr != nil {
		return ferr
	}
	frozen := r.now()
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout())
	defer cancel()
	// Everything from here to the thaw is done with the holder frozen;
	// fail thaws it first.
	thawed := false
	var toks []uint64 // the tokens revoked
	fail := func(format string, args ...any) error {
		if !thawed {
			if terr := r.thaw(target); terr != nil {
				args = append(args, terr)
				format += " (and thawing it: %v)"
			}
			r.resumeRevoked(toks)
			r.faultDone()
		}
		return fmt.Errorf(format, args...)
	}
	// The token to revoke, as the register saw it, is the holder's own;
	// in the multi workload, that of the name whose set it read.
	lockName := target.cfg.Lock
	if e.Name != "" {
		lockName = e.Name
	}
	g, ok := lastEvent(target, 0, "acq-ok")
	if !ok || !hasToken(g, e.Token) || g.Shared {
		return fail("client %d read the register with token %d, but its latest grant is %+v", target.id, e.Token, g)
	}
	// In the multi workload every name of the grant is revoked: the
	// next holder of lockName may need the others too.
	names, which := []string{lockName}, lockName
	toks = []uint64{e.Token}
	if len(g.Names) > 0 {
		names, toks, which = g.Names, g.Tokens, ""
	}
	before, err := r.clientRecords(target.id, which)
	if err != nil {
		return fail("listing client %d's records: %v", target.id, err)
	}
	if len(before) != len(names) {
		return fail("client %d, frozen holding tokens %v, has %d records of %q on the server; want %d: %s", target.id, toks, len(before), names, len(names), r.recordsText())
	}
	rv, closeRevoker, err := r.revoker(ctx)
	if err != nil {
		return fail("opening the test's own Locker: %v", err)
	}
	defer closeRevoker()

	called, revoked, err := r.revokeAll(ctx, rv, target.id, names, toks)
	if err != nil {
		return fail("%v", err)
	}
	after, err := r.clientRecords(target.id, which)
	if err != nil {
		return fail("listing client %d's records after Revoke: %v", target.id, err)
	}
	for k := range before {
		if after[k] {
			return fail("client %d's record %s of token %d is still on the server after Revoke returned nil", target.id, k, e.Token)
		}
	}
	// Another client takes the lock and writes with a newer token, all
	// while the holder is frozen.
	if err := r.waitHigherWrite(e.Name, e.Token); err != nil {
		return fail("after revoking client %d (token %d): %v", target.id, e.Token, err)
	}
	var next event
	var nextClient int
	for _, p := range r.all() {
		if p == target {
			continue
		}
		if g, ok := firstGrantAbove(p, called, lockName, e.Token); ok && (nextClient == 0 || g.T < next.T) {
			next, nextClient = g, p.id
		}
	}
	thawAt := r.now()
	if terr := r.thaw(target); terr != nil {
		r.faultDone()
		return terr
	}
	thawed = true
	r.resumeRevoked(toks)
	r.faultDone()
	if nextClient == 0 {
		return fmt.Errorf("no client logged a grant of %q with a token above %d after the revocation, though a higher write was accepted", lockName, e.Token)
	}
	if next.T >= thawAt {
		return fmt.Errorf("client %d was granted token %d at %v, after frozen client %d was thawed at %v", nextClient, tokenOf(next, lockName), ms(next.T), target.id, ms(thawAt))
	}
	r.t.Logf("revoked client %d's token %d while it was frozen (since %v): Revoke took %v, client %d granted token %d %v after the call, %v before the thaw",
		target.id, e.Token, ms(frozen), time.Duration(revoked-called), nextClient, tokenOf(next, lockName), time.Duration(next.T-called), time.Duration(thawAt-next.T))

	// Thawed, the holder hears of the deletion and sends its write.
	var done, res event
	if !poll(r.timeout(), func() bool {
		var ok1, ok2 bool
		done, ok1 = lastEvent(target, frozen, "done")
		res, ok2 = lastEvent(target, frozen, "write-ok", "write-stale", "write-err", "write-unknown")
		return ok1 && ok2 && hasToken(done, e.Token) && res.Token == e.Token
	}) {
		return fmt.Errorf("client %d (token %d) did not report both its lease's end and its write's outcome within %v of being thawed", target.id, e.Token, r.timeout())
	}
	r.t.Logf("revoked client %d's lease ended: %s", target.id, done.Err)
	if done.Class != "lost" || !(strings.Contains(done.Err, "deleted") || strings.Contains(done.Err, "revoked")) {
		return fmt.Errorf("revoked client %d's lease ended with %s error %q; want ErrLost with a cause naming the deletion or revocation", target.id, done.Class, done.Err)
	}
	if res.Kind != "write-stale" {
		return fmt.Errorf("revoked client %d's write (token %d) ended %q; want write-stale", target.id, e.Token, res.Kind)
	}
	return nil
}

// resumeRevoked records that the client whose grants of toks were revoked
// runs again from now on.
func (r *run) resumeRevoked(toks []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tok := range toks {
		if rv, ok := r.revoked[tok]; ok {
			rv.resumed = r.now()
			r.revoked[tok] = rv
		}
	}
}

// revokeAll revokes client's grants of names, with toks, through rv and
// records them; it returns when Revoke was first called and when the last
// returned.
func (r *run) revokeAll(ctx context.Context, rv lock.Revoker, client int, names []string, toks []uint64) (called, revoked int64, err error) {
	called = r.now()
	for i, n := range names {
		if err := rv.Revoke(ctx, n, fencing.Token(toks[i])); err != nil {
			return called, r.now(), fmt.Errorf("Revoke(%q, %d) of frozen client %d = %v; want nil", n, toks[i], client, err)
		}
	}
	revoked = r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revoked == nil {
		r.revoked = map[uint64]revocation{}
	}
	for _, tok := range toks {
		r.revoked[tok] = revocation{client: client, called: called, at: revoked, resumed: never}
	}
	return called, revoked, nil
}
