package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

// txnResp builds the answer of a create transaction: its revision, whether
// its If held, and the records each of its range reads returned.
func txnResp(rev int64, succeeded bool, ranges ...[]*mvccpb.KeyValue) *clientv3.TxnResponse {
	resp := &clientv3.TxnResponse{Header: &pb.ResponseHeader{Revision: rev}, Succeeded: succeeded}
	if succeeded {
		// The put comes first in the Then branch.
		resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{}}})
	}
	for _, kvs := range ranges {
		resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{Kvs: kvs}}})
	}
	return resp
}

func kv(key string, createRev int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), CreateRevision: createRev}
}

// TestPlace checks how an acquisition reads the answer of its create: its
// token, the record it must wait for, and when TryAcquire gives up.
func TestPlace(t *testing.T) {
	const own, other = "p/x/#own", "p/x/#other"
	for _, tc := range []struct {
		name      string
		try       bool
		ambiguous bool
		resp      *clientv3.TxnResponse
		wantRev   int64
		wantPred  string // "" for none
		wantErr   error
	}{
		{name: "acquire, first in line", resp: txnResp(10, true, []*mvccpb.KeyValue{kv(own, 10)}, []*mvccpb.KeyValue{kv(own, 10)}), wantRev: 10},
		{name: "acquire, behind one", resp: txnResp(12, true, []*mvccpb.KeyValue{kv(own, 12), kv(other, 9)}, []*mvccpb.KeyValue{kv(other, 9)}), wantRev: 12, wantPred: other},
		{name: "acquire, behind readers", resp: txnResp(12, true, []*mvccpb.KeyValue{kv(own, 12), kv(other+"~r", 9)}, []*mvccpb.KeyValue{kv(other+"~r", 3)}), wantRev: 12, wantPred: other + "~r"},
		{name: "acquire, name is a semaphore", resp: txnResp(12, true, []*mvccpb.KeyValue{kv(own, 12), kv(other, 9)}, []*mvccpb.KeyValue{kv(other+"~s3", 3)}), wantErr: lock.ErrIncompatible},
		{name: "acquire, record vanished", resp: txnResp(12, false, nil, nil), wantErr: lock.ErrLost},
		{name: "try, created", try: true, resp: txnResp(20, true), wantRev: 20},
		{name: "try, held by another", try: true, resp: txnResp(21, false, []*mvccpb.KeyValue{kv(other, 7)}, nil), wantErr: lock.ErrLocked},
		{name: "try, retry found its own record", try: true, ambiguous: true, resp: txnResp(22, false, []*mvccpb.KeyValue{kv(own, 19)}, nil), wantRev: 19},
		{name: "try, name is a semaphore", try: true, resp: txnResp(21, false, []*mvccpb.KeyValue{kv(other+"~s2", 7)}, nil), wantErr: lock.ErrIncompatible},
		{name: "try, held by readers", try: true, resp: txnResp(21, false, []*mvccpb.KeyValue{kv(other+"~r", 7)}, nil), wantErr: lock.ErrLocked},
		{name: "try, nothing there", try: true, resp: txnResp(23, false, nil, nil), wantErr: lock.ErrLocked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &acquisition{record: record{key: own, pfx: "p/x/#", ambiguous: tc.ambiguous}, name: "x", try: tc.try}
			v, err := a.place(context.Background(), tc.resp)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("place() = %v; want an error wrapping %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("place() = %v; want nil", err)
			}
			var pred *mvccpb.KeyValue
			if len(v.ahead) > 0 {
				pred = v.ahead[len(v.ahead)-1]
			}
			readRev := v.rev
			if a.rev != tc.wantRev {
				t.Errorf("token = %d; want %d", a.rev, tc.wantRev)
			}
			if readRev != tc.resp.Header.Revision {
				t.Errorf("read revision = %d; want the answer's %d", readRev, tc.resp.Header.Revision)
			}
			switch got := pred; {
			case tc.wantPred == "" && got != nil:
				t.Errorf("predecessor = %q; want none", got.Key)
			case tc.wantPred != "" && (got == nil || string(got.Key) != tc.wantPred):
				t.Errorf("predecessor = %v; want %q", got, tc.wantPred)
			}
		})
	}
}

// TestDecide checks what an acquisition makes of a read of its queue:
// granted (with a touch or not), refused, or which records it watches.
func TestDecide(t *testing.T) {
	const own = "p/x/#own"
	sem := func(keys ...string) []*mvccpb.KeyValue {
		var kvs []*mvccpb.KeyValue
		for i, k := range keys {
			kvs = append(kvs, kv("p/x/#"+k+"~s2", int64(i+1)))
		}
		return kvs
	}
	for _, tc := range []struct {
		name string
		req  queue.Request
		try  bool
		v    view
		want decision
		err  error
	}{
		{name: "exclusive, first", req: queue.ExclusiveRequest, v: view{rev: 5}, want: decision{granted: true}},
		{name: "exclusive, behind one", req: queue.ExclusiveRequest, v: view{ahead: []*mvccpb.KeyValue{kv("p/x/#a", 3)}}, want: decision{watch: []string{"p/x/#a"}}},
		{name: "permit, admitted by its create", req: queue.PermitRequest(2), v: view{ahead: sem("a"), next: sem("c"), created: true}, want: decision{granted: true}},
		{name: "permit, admitted later, followed", req: queue.PermitRequest(2), v: view{ahead: sem("a"), next: sem("c")}, want: decision{granted: true, touch: true}},
		{name: "permit, first waiter", req: queue.PermitRequest(2), v: view{ahead: sem("a", "b")}, want: decision{watch: []string{"p/x/#a~s2", "p/x/#b~s2"}, byDeletion: true}},
		{name: "permit, later waiter", req: queue.PermitRequest(2), v: view{ahead: sem("a", "b", "c")}, want: decision{watch: []string{"p/x/#c~s2"}, puts: true}},
		{name: "permit, admitted by a deletion", req: queue.PermitRequest(2), v: view{admitted: true}, want: decision{granted: true, touch: true}},
		{name: "shared try, behind a writer", req: queue.SharedRequest, try: true, v: view{ahead: []*mvccpb.KeyValue{kv("p/x/#a", 3)}}, err: lock.ErrLocked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &acquisition{record: record{key: own, pfx: "p/x/#"}, req: tc.req, try: tc.try}
			got, err := a.decide(tc.v)
			if !errors.Is(err, tc.err) {
				t.Fatalf("decide() = %v; want %v", err, tc.err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("decide() = %+v; want %+v", got, tc.want)
			}
		})
	}
}

// TestRequestOf checks how a record's key tells its kind, and that a key
// this package would not write counts as exclusive: it blocks, never
// admits.
func TestRequestOf(t *testing.T) {
	for _, req := range []queue.Request{queue.ExclusiveRequest, queue.SharedRequest, queue.PermitRequest(1), queue.PermitRequest(40)} {
		key := recordKey("app/jobs/x/#", 0x1234, 1, req)
		if got := requestOf([]byte(key)); got != req {
			t.Errorf("requestOf(%q) = %v; want %v", key, got, req)
		}
	}
	for _, key := range []string{"app/x/#00000000000012-1~", "app/x/#00000000000012-1~s0", "app/x/#00000000000012-1~q", "app/x/#00000000000012-1~r~r", "garbage"} {
		if got := requestOf([]byte(key)); got != queue.ExclusiveRequest {
			t.Errorf("requestOf(%q) = %v; want exclusive", key, got)
		}
	}
}
