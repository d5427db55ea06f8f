package zklock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"regexp"
	"slices"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/queue"
	"github.com/fencelock/fencelock/lock"
)

func TestLockChildPattern(t *testing.T) {
	good := "~0123456789abcdef0123456789abcdef~0000000042"
	tests := []struct {
		name string
		ok   bool
	}{
		{good, true},
		{"_c_0123456789abcdef0123456789abcdef-lock-00000000x2", false},
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
		p := newPrefix(LayoutFencelock, req)
		if got, ok := parseChild(p + "0000000000"); !ok || got != req {
			t.Errorf("parseChild(newPrefix(%v) + sequence) = %v, %v; want %v, true", req, got, ok, req)
		}
	}
	for _, y := range []Layout{LayoutCurator, LayoutCuratorReadWrite, LayoutCuratorLatch} {
		for _, req := range []queue.Request{queue.ExclusiveRequest, queue.SharedRequest} {
			if _, ok := recipeName(y, req); !ok {
				continue
			}
			p := newPrefix(y, req)
			if got, ok := parseChild(p + "0000000007"); !ok || got != req || !curatorName.MatchString(p+"0000000007") {
				t.Errorf("parseChild(newPrefix(%s, %v) + sequence) = %v, %v; want %v, true, a name of Curator's shape", y, req, got, ok, req)
			}
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

// curatorName is the shape of the records of Curator's recipes: "_c_",
// a version 4 UUID, '-', the recipe's name, the sequence number.
var curatorName = regexp.MustCompile(`^_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-(lock-|latch-|__WRIT__|__READ__)[0-9]{10}$`)

// TestForeignChildren checks the parse of the other recipes' records.
func TestForeignChildren(t *testing.T) {
	x, r := queue.ExclusiveRequest, queue.SharedRequest
	tests := []struct {
		name string
		want queue.Request
		ok   bool
	}{
		{"_c_0123456789abcdef0123456789abcdef-lock-0000000042", x, true},     // go-zookeeper
		{"_c_5bd6ab9e-2ba5-4e0a-8a47-7c6c8a0c1f3d-lock-0000000042", x, true}, // Curator InterProcessMutex
		{"_c_5bd6ab9e-2ba5-4e0a-8a47-7c6c8a0c1f3d-latch-0000000001", x, true},
		{"_c_5bd6ab9e-2ba5-4e0a-8a47-7c6c8a0c1f3d-__WRIT__0000000001", x, true},
		{"_c_5bd6ab9e-2ba5-4e0a-8a47-7c6c8a0c1f3d-__READ__0000000001", r, true},
		{"0123456789abcdef0123456789abcdef__lock__0000000003", x, true}, // Kazoo
		{"0123456789abcdef0123456789abcdef__rlock__0000000003", r, true},
		{"-lock-0000000003", x, true},
		{"_c_0123456789abcdef0123456789abcdef-lock-000000042", x, false},
		{"_c_0123456789abcdef0123456789abcdef-lock-00000000420", x, false},
		{"_c_0123456789abcdef0123456789abcdef-lock0000000042", x, false},
		{"_c_0123456789abcdef0123456789abcdef-lease-0000000042", x, false},
		{"0123456789abcdef0123456789abcdef__READ__000000000a", x, false},
		{"lock-0000000042", x, false},
		{"0000000042", x, false},
		{"__lock__", x, false},
		{"nightly", x, false},
		{"~delay~_c_0123456789abcdef0123456789abcdef-lock-", x, false},
	}
	for _, tt := range tests {
		got, ok := parseChild(tt.name)
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("parseChild(%q) = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	q, reqs := lockQueue([]string{"b__rlock__0000000009", "~aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa~0000000003", "_c_x-lock-0000000001", "sub"})
	if want := []string{"_c_x-lock-0000000001", "~aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa~0000000003", "b__rlock__0000000009"}; !slices.Equal(q, want) || reqs[2] != r {
		t.Errorf("lockQueue() = %v, %v; want %v, the last shared", q, reqs, want)
	}
	for p, want := range map[string]bool{"/r/a/~aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa~0000000003": true, "/r/a/_c_x-lock-0000000001": false,
		"/r/a/~aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa~r~0000000003": false} {
		if got := marksRelease(p); got != want {
			t.Errorf("marksRelease(%q) = %v; want %v", p, got, want)
		}
	}
}

// TestLockNameShapes checks that a lock cannot be named so that its
// parent znode would be taken for a record of another lock.
func TestLockNameShapes(t *testing.T) {
	for name, ok := range map[string]bool{"jobs": true, "jobs/nightly-lock-1": true, "x-lock-0000000001": false,
		"jobs/x-lock-0000000001": false, "a/b__READ__0000000001/c": false} {
		err := validName(name)
		if (err == nil) != ok || err != nil && !errors.Is(err, lock.ErrInvalidName) {
			t.Errorf("validName(%q) = %v; want ok %v, else an error wrapping %v", name, err, ok, lock.ErrInvalidName)
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

// TestLayoutRefuses checks which kinds of request each layout refuses.
func TestLayoutRefuses(t *testing.T) {
	x, r, s := queue.ExclusiveRequest, queue.SharedRequest, queue.PermitRequest(2)
	for _, tt := range []struct {
		y       Layout
		refused []queue.Request
		allowed []queue.Request
	}{
		{LayoutFencelock, nil, []queue.Request{x, r, s}},
		{LayoutCurator, []queue.Request{r, s}, []queue.Request{x}},
		{LayoutCuratorLatch, []queue.Request{r, s}, []queue.Request{x}},
		{LayoutCuratorReadWrite, []queue.Request{s}, []queue.Request{x, r}},
	} {
		for _, req := range tt.refused {
			if _, ok := recipeName(tt.y, req); ok {
				t.Errorf("recipeName(%s, %v) ok = true; want false", tt.y, req)
			}
		}
		for _, req := range tt.allowed {
			if _, ok := recipeName(tt.y, req); !ok {
				t.Errorf("recipeName(%s, %v) ok = false; want true", tt.y, req)
			}
		}
	}
}
