package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"math"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/fenced"
	"github.com/fencelock/fencelock/internal/nilcheck"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// Fencing data kept in etcd itself: GuardedTxn (while a lease holds) and
// PutFenced (by token). See docs/design/etcd.md, "Guarded and fenced
// writes".

// GuardedTxn commits ops in one etcd transaction that applies them only
// while lease holds its lock: its If is [Lease.IsHeld], the comparison
// "the lease's record still exists with its own create revision". The
// record is deleted when the lease is released or lost and every later
// grant is a new record, so once anyone else could hold the lock, the
// transaction writes nothing, whatever the writer's clock or state says.
//
// lease must be a *Lease from this package, reached through a lock.Lease
// (the value Acquire returned). kv must see the same key space as the
// Locker's client: usually that very *clientv3.Client. ops may be any
// operations a transaction accepts, reads included; the response's
// Responses hold their results in order. No ops makes GuardedTxn a
// linearizable "is the lease still held" check.
//
// A lease that has already ended locally is refused without I/O, with an
// error wrapping its Err (lock.ErrLost or lock.ErrReleased). When the
// comparison fails on the server, nothing was written and the error wraps
// lock.ErrReleased if the lease was released meanwhile and lock.ErrLost
// otherwise; the local lease may not have noticed yet. A nil ctx, a nil kv
// (also a nil *clientv3.Client, or one not made by clientv3.New), a nil
// lease or a lease of another backend is an error wrapping
// lock.ErrInvalidConfig. Any other error is etcd's, and when it is a
// timeout or a lost connection the transaction may or may not have been
// applied.
func GuardedTxn(ctx context.Context, kv clientv3.KV, lease lock.Lease, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if err := checkKV(ctx, kv); err != nil {
		return nil, fmt.Errorf("etcdlock: guarded txn: %w", err)
	}
	le, err := etcdLease(lease)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: guarded txn: %w", err)
	}
	ctx, w := le.l.tel.StartWrite(ctx, guardedTxnHelper, le.Name(), uint64(le.rev))
	if err := le.st.Err(); err != nil {
		err = fmt.Errorf("etcdlock: guarded txn on %q: %w", le.Name(), err)
		w.End(telemetry.Rejected, err)
		return nil, err
	}
	resp, err := kv.Txn(ctx).If(le.IsHeld()).Then(ops...).Commit()
	if err != nil {
		err = fmt.Errorf("etcdlock: guarded txn on %q: %w", le.Name(), err)
		w.End("", err)
		return nil, err
	}
	if !resp.Succeeded {
		if err := le.st.Err(); errors.Is(err, lock.ErrReleased) {
			err = fmt.Errorf("etcdlock: guarded txn on %q: nothing written: %w", le.Name(), err)
			w.End(telemetry.Rejected, err)
			return resp, err
		}
		err := fmt.Errorf("etcdlock: guarded txn on %q: nothing written: %w: record %s (revision %d) is gone",
			le.Name(), lock.ErrLost, le.Key(), le.rev)
		w.End(telemetry.Rejected, err)
		return resp, err
	}
	w.End(telemetry.Accepted, nil)
	return resp, nil
}

// guardedTxnHelper is the helper attribute of GuardedTxn's fencing
// decisions.
const guardedTxnHelper = "etcdlock.GuardedTxn"

// etcdLease returns lease as a *Lease, or an error wrapping
// lock.ErrInvalidConfig.
func etcdLease(lease lock.Lease) (*Lease, error) {
	le, ok := lease.(*Lease)
	switch {
	case lease == nil:
		return nil, fmt.Errorf("nil lease: %w", lock.ErrInvalidConfig)
	case !ok:
		return nil, fmt.Errorf("lease of type %T is not an etcd lease (*etcdlock.Lease): %w", lease, lock.ErrInvalidConfig)
	case le == nil:
		return nil, fmt.Errorf("nil *etcdlock.Lease: %w", lock.ErrInvalidConfig)
	case !le.valid():
		return nil, errNotLease()
	}
	return le, nil
}

// encodeFenced returns the stored form of a fenced value (see package
// internal/fenced, shared with zklock): the token in 20 zero-padded decimal
// digits, a colon, then the value. Fixed width makes byte order equal token
// order, which is what lets etcd compare tokens in a transaction.
func encodeFenced(token fencing.Token, value string) string {
	return string(fenced.Encode(token, []byte(value)))
}

// PutFenced sets key to value if token is not lower than the highest token
// the key has accepted, records token as the new highest, and returns the
// revision of the write (the key's new mod revision). A lower token is
// rejected with a *fencing.StaleTokenError (Resource is key) and nothing
// is written. Equal tokens are accepted, so one grant may write
// many times. A zero token is an error wrapping fencing.ErrInvalidToken,
// an empty key, a nil ctx or a nil kv one wrapping lock.ErrInvalidConfig.
//
// The check and the write are one transaction, a missing key or an empty
// value counts as token 0, and the check holds for writers whose lease has
// long ended. It costs one round trip, also when the write is rejected.
//
// The stored value is the token in 20 zero-padded decimal digits, a colon,
// then value ("00000000000000000042:hello"); read it with GetFenced. The
// key must be written only through PutFenced: a value without the header is
// reported with an error wrapping fencing.ErrInvalidToken (and one that
// sorts below every header, such as "0", is overwritten).
//
// Every writer of the key must use tokens of one source.
func PutFenced(ctx context.Context, kv clientv3.KV, key, value string, token fencing.Token) (int64, error) {
	if err := checkFencedArgs(ctx, kv, key); err != nil {
		return 0, fmt.Errorf("etcdlock: put fenced: %w", err)
	}
	if token == 0 {
		return 0, fmt.Errorf("etcdlock: put fenced %q: zero token: %w", key, fencing.ErrInvalidToken)
	}
	put := clientv3.OpPut(key, encodeFenced(token, value))
	// etcd fails every value comparison on a missing key, so a missing key
	// takes the first branch and an existing one the nested transaction.
	notLower := clientv3.Compare(clientv3.CreateRevision(key), ">", 0) // the highest token accepts anything stored
	if token < math.MaxUint64 {
		notLower = clientv3.Compare(clientv3.Value(key), "<", encodeFenced(token+1, ""))
	}
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(put).
		Else(clientv3.OpTxn([]clientv3.Cmp{notLower}, []clientv3.Op{put}, []clientv3.Op{clientv3.OpGet(key)})).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("etcdlock: put fenced %q: %w", key, err)
	}
	// A write transaction's header revision is the revision it wrote at.
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	nested := resp.Responses[0].GetResponseTxn()
	if nested == nil {
		return 0, fmt.Errorf("etcdlock: put fenced %q: unexpected transaction response %v", key, resp.Responses)
	}
	if nested.Succeeded {
		return resp.Header.Revision, nil
	}
	get := nested.Responses[0].GetResponseRange()
	if get == nil || len(get.Kvs) == 0 {
		// Cannot happen: the key existed in the same transaction.
		return 0, fmt.Errorf("etcdlock: put fenced %q: rejected, but the key is missing", key)
	}
	highest, _, err := fenced.Decode(get.Kvs[0].Value)
	if err != nil {
		return 0, fmt.Errorf("etcdlock: put fenced %q: %w", key, err)
	}
	return 0, &fencing.StaleTokenError{Resource: key, Token: token, Highest: highest}
}

// GetFenced returns the value PutFenced last stored at key and the token it
// was written with. A missing key returns "", 0 and no error. The read is
// linearizable. A value that PutFenced did not write returns an error
// wrapping fencing.ErrInvalidToken.
//
// Use it to read the data, never as the check before a write: PutFenced
// makes that check itself, atomically.
func GetFenced(ctx context.Context, kv clientv3.KV, key string) (string, fencing.Token, error) {
	if err := checkFencedArgs(ctx, kv, key); err != nil {
		return "", 0, fmt.Errorf("etcdlock: get fenced: %w", err)
	}
	resp, err := kv.Get(ctx, key)
	if err != nil {
		return "", 0, fmt.Errorf("etcdlock: get fenced %q: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0, nil
	}
	token, value, err := fenced.Decode(resp.Kvs[0].Value)
	if err != nil {
		return "", 0, fmt.Errorf("etcdlock: get fenced %q: %w", key, err)
	}
	return string(value), token, nil
}

// checkKV refuses a nil ctx and a kv that would panic on first use: nil,
// a nil pointer in the interface, or a *clientv3.Client without its KV
// (a zero Client rather than one from clientv3.New).
func checkKV(ctx context.Context, kv clientv3.KV) error {
	if ctx == nil {
		return fmt.Errorf("nil context: %w", lock.ErrInvalidConfig)
	}
	if nilcheck.IsNil(kv) {
		return fmt.Errorf("nil kv: %w", lock.ErrInvalidConfig)
	}
	if c, ok := kv.(*clientv3.Client); ok && nilcheck.IsNil(c.KV) {
		return fmt.Errorf("client not created by clientv3.New (no KV): %w", lock.ErrInvalidConfig)
	}
	return nil
}

func checkFencedArgs(ctx context.Context, kv clientv3.KV, key string) error {
	if err := checkKV(ctx, kv); err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("empty key: %w", lock.ErrInvalidConfig)
	}
	return nil
}
