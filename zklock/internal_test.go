package zklock

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/queue"
)

func TestLockChildPattern(t *testing.T) {
	good := "~0123456789abcdef0123456789abcdef~0000000042"
	tests := []struct {
		name string
		ok   bool
	}{
		{good, true},
		{"_c_0123456789abcdef0123456789abcdef-lock-0000000042", false},
		{"b", false},
		{"~0123456789abcdef0123456789abcdeF~0000000042", false},
		{"~0123456789abcdef0123456789abcdef~000000004x", false},
		{"~0123456789abcdef0123456789abcdef~00000000420", false},
		{"-0123456789abcdef0123456789abcdef~0000000042", false},
	}
	for _, tt := range tests {
		if _, got := parseChild(tt.name); got != tt.ok {
			t.Errorf("parseChild(%q) ok = %v; want %v", tt.name, got, tt.ok)
		}
	}
	for _, req := range []queue.Request{queue.ExclusiveRequest, queue.SharedRequest, queue.PermitRequest(1), queue.PermitRequest(queue.MaxLimit)} {
		p := newPrefix(req)
		if got, ok := parseChild(p + "0000000000"); !ok || got != req {
			t.Errorf("parseChild(newPrefix(%v) + sequence) = %v, %v; want %v, true", req, got, ok, req)
		}
	}
	tagged := map[string]bool{
		"~0123456789abcdef0123456789abcdef~r~0000000042":            true,
		"~0123456789abcdef0123456789abcdef~s3~0000000042":           true,
		"~0123456789abcdef0123456789abcdef~~0000000042":             false,
		"~0123456789abcdef0123456789abcdef~r0000000042":             false,
		"~0123456789abcdef0123456789abcdef~s0~0000000042":           false,
		"~0123456789abcdef0123456789abcdef~x~0000000042":            false,
		"~0123456789abcdef0123456789abcdef~r~r~0000000042":          false,
		"~0123456789abcdef0123456789abcdef~s99999999999~0000000042": false,
	}
	for name, ok := range tagged {
		if _, got := parseChild(name); got != ok {
			t.Errorf("parseChild(%q) ok = %v; want %v", name, got, ok)
		}
	}
}

func TestQueueOrder(t *testing.T) {
	a := "~aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa~0000000003"
	b := "~bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb~s4~0000000001"
	c := "~00000000000000000000000000000000~0000000002"
	got, _ := lockQueue([]string{a, "sub", b, c})
	if want := []string{b, c, a}; !slices.Equal(got, want) {
		t.Errorf("lockQueue() = %v; want %v", got, want)
	}
}

// TestFrames checks the framing that keepalive relies on, with packets split
// and joined arbitrarily.
func TestFrames(t *testing.T) {
	var stream []byte
	var want [][]byte
	for _, body := range [][]byte{{0, 0, 0, 1}, {}, bytes.Repeat([]byte{7}, 100), {0xff, 0xff, 0xff, 0xff, 9}} {
		stream = binary.BigEndian.AppendUint32(stream, uint32(len(body)))
		stream = append(stream, body...)
		w := body
		if len(w) > frameKeep {
			w = w[:frameKeep]
		}
		want = append(want, w)
	}
	for _, chunk := range []int{1, 3, 5, 64, len(stream)} {
		var f frames
		var got [][]byte
		for i := 0; i < len(stream); i += chunk {
			f.feed(stream[i:min(i+chunk, len(stream))], func(b []byte) { got = append(got, slices.Clone(b)) })
		}
		if len(got) != len(want) {
			t.Fatalf("chunk %d: %d packets; want %d", chunk, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) && !(len(got[i]) == 0 && len(want[i]) == 0) {
				t.Errorf("chunk %d: packet %d = %v; want %v", chunk, i, got[i], want[i])
			}
		}
	}
}

func TestFreeBetween(t *testing.T) {
	child := func(p byte, seq string) string { return "~" + string(bytes.Repeat([]byte{p}, 32)) + "~" + seq }
	x1 := child('a', "0000000004")
	x2 := child('b', "0000000006")
	x2early := child('b', "0000000005")
	o := &observation{last: observed{listed: true, cversion: 5, kids: map[string]bool{x1: true}, holder: x1}}
	// x1 created at 4 (cversion 5 after); deleted at 5, x2 created at 6.
	if !o.freeBetween([]string{x2}, &zk.Stat{Cversion: 7}, x2) {
		t.Errorf("freeBetween(delete then create) = false; want true")
	}
	// x2 created at 5 (while x1 held), x1 deleted at 6: a hand-over.
	if o.freeBetween([]string{x2early}, &zk.Stat{Cversion: 7}, x2early) {
		t.Errorf("freeBetween(create then delete) = true; want false")
	}
	// An unexplained change in between: unsure, so no free state.
	if o.freeBetween([]string{x2}, &zk.Stat{Cversion: 9}, x2) {
		t.Errorf("freeBetween(unexplained changes) = true; want false")
	}
}
