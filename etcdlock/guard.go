package etcdlock

import (
	"context"
	"fmt"
	"math"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/internal/fenced"
	"github.com/fencelock/fencelock/internal/nilcheck"
	"github.com/fencelock/fencelock/internal/telemetry"
	"github.com/fencelock/fencelock/lock"
)

// GuardedTxn commits ops in one etcd transaction that applies them only
// while lease, a *Lease of this package, holds its lock: its If is
// [Lease.IsHeld]. kv must see the Locker's key space. With no ops it is a
// linearizable "is the lease still held" check.
//
// A lease that has ended locally is refused without I/O, with an error
// wrapping its Err; one the server finds gone writes nothing and wraps
// lock.ErrReleased or lock.ErrLost. A nil ctx, kv or lease, or a lease of
// another backend, is an error wrapping lock.ErrInvalidConfig. Any other
// error is etcd's: after a timeout the transaction may have been applied.
func GuardedTxn(ctx context.Context, kv clientv3.KV, lease lock.Lease, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	return GuardedTxnAll(ctx, kv, []lock.Lease{lease}, ops...)
}

// GuardedTxnAll is [GuardedTxn] with several leases, such as those of a
// [lock.MultiLease]: ops apply only while every one holds its lock. No
// leases is an error wrapping lock.ErrInvalidConfig.
func GuardedTxnAll(ctx context.Context, kv clientv3.KV, leases []lock.Lease, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	err := checkKV(ctx, kv)
	if err == nil && len(leases) == 0 {
		err = fmt.Errorf("no leases: %w", lock.ErrInvalidConfig)
	}
	les, held, on := make([]*Lease, len(leases)), make([]clientv3.Cmp, len(leases)), ""
	for i, lease := range leases {
		if err == nil {
			les[i], err = etcdLease(lease)
		}
		held[i], on = les[i].IsHeld(), on+fmt.Sprintf(", %q", les[i].Name())
	}
	if err != nil {
		return nil, fmt.Errorf("etcdlock: guarded txn: %w", err)
	}
	ctx, w := les[0].l.tel.StartWrite(ctx, "etcdlock.GuardedTxn", les[0].Name(), uint64(les[0].rev))
	for _, le := range les {
		if err := le.st.Err(); err != nil {
			err = fmt.Errorf("etcdlock: guarded txn on %s: %w", on[2:], err)
			w.End(telemetry.Rejected, err)
			return nil, err
		}
	}
	resp, err := kv.Txn(ctx).If(held...).Then(ops...).Commit()
	switch {
	case err != nil:
		err = fmt.Errorf("etcdlock: guarded txn on %s: %w", on[2:], err)
		w.End("", err)
		return nil, err
	case resp.Succeeded:
		w.End(telemetry.Accepted, nil)
		return resp, nil
	}
	err = fmt.Errorf("%w: a record of %s is gone", lock.ErrLost, on[2:])
	for _, le := range les {
		if lerr := le.st.Err(); lerr != nil {
			err = lerr
		}
	}
	err = fmt.Errorf("etcdlock: guarded txn on %s: nothing written: %w", on[2:], err)
	w.End(telemetry.Rejected, err)
	return resp, err
}

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
		return nil, errNotLease
	}
	return le, nil
}

// encodeFenced returns the stored form of a fenced value (internal/fenced),
// whose byte order is token order.
func encodeFenced(token fencing.Token, value string) string {
	return string(fenced.Encode(uint64(token), []byte(value)))
}

// PutFenced sets key to value if token is not lower than the highest token
// the key has accepted, in one transaction, and returns the revision of
// the write. A lower token is rejected with a *fencing.StaleTokenError
// (Resource is key); equal tokens are accepted. A zero token is an error
// wrapping fencing.ErrInvalidToken; an empty key, a nil ctx or a nil kv
// one wrapping lock.ErrInvalidConfig. The stored value carries the token
// ("00000000000000000042:hello"): write the key only through PutFenced,
// read it with GetFenced, and use tokens of one source.
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
	return 0, &fencing.StaleTokenError{Resource: key, Token: token, Highest: fencing.Token(highest)}
}

// GetFenced returns the value PutFenced last stored at key and its token,
// in a linearizable read; "", 0 and no error for a missing key. A value
// that PutFenced did not write is an error wrapping
// fencing.ErrInvalidToken. It reads the data: PutFenced makes its own
// check.
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
	return string(value), fencing.Token(token), nil
}

// checkKV refuses a nil ctx and a kv that would panic on first use.
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
