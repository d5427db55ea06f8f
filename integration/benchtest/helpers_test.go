package benchtest

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := summarize(ds)
	want := stats{N: 100, P50: 50, P99: 99, Mean: 50.5, Max: 100, P10: 10, P25: 25, P75: 75, P90: 90}
	if got != want {
		t.Errorf("summarize(1..100ms) = %+v; want %+v", got, want)
	}
	if got := summarize(nil); got != (stats{}) {
		t.Errorf("summarize(nil) = %+v; want zero", got)
	}
}

func TestZKVersion(t *testing.T) {
	tests := []struct{ srvr, want string }{
		{"Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC\nLatency min/avg/max: 0/0.0/0\n", "ZooKeeper 3.8.0"},
		{"Zookeeper version: 3.9.2, built on x\n", "ZooKeeper 3.9.2"},
		{"something else\n", "something else"},
	}
	for _, tt := range tests {
		if got := zkVersion(tt.srvr); got != tt.want {
			t.Errorf("zkVersion(%q) = %q; want %q", tt.srvr, got, tt.want)
		}
	}
}

// TestFramer checks that the ZooKeeper frame counter skips the handshake
// and counts frames however the stream is cut.
func TestFramer(t *testing.T) {
	frame := func(xid int32, body int) []byte {
		b := make([]byte, 4+4+body)
		binary.BigEndian.PutUint32(b, uint32(4+body))
		binary.BigEndian.PutUint32(b[4:], uint32(xid))
		return b
	}
	var stream []byte
	stream = append(stream, frame(0, 30)...) // handshake
	for _, xid := range []int32{1, -2, 2, -1, 3} {
		stream = append(stream, frame(xid, 7)...)
	}
	for _, chunk := range []int{1, 3, 5, 1000} {
		var xids []int32
		f := framer{frame: func(p []byte) { xids = append(xids, int32(binary.BigEndian.Uint32(p))) }}
		for i := 0; i < len(stream); i += chunk {
			f.feed(stream[i:min(i+chunk, len(stream))])
		}
		if want := []int32{1, -2, 2, -1, 3}; len(xids) != len(want) {
			t.Errorf("chunks of %d: frames %v; want %v", chunk, xids, want)
		} else {
			for i := range want {
				if xids[i] != want[i] {
					t.Errorf("chunks of %d: frames %v; want %v", chunk, xids, want)
					break
				}
			}
		}
	}
}

func TestParseRows(t *testing.T) {
	clients := []struct {
		in   string
		want []int
	}{
		{"2,8,32", []int{2, 8, 32}},
		{" 4 ", []int{4}},
		{"1", nil},
		{"8,2", nil},
		{"two", nil},
	}
	for _, tt := range clients {
		got, err := parseClients(tt.in)
		if (err != nil) != (tt.want == nil) || !slices.Equal(got, tt.want) {
			t.Errorf("parseClients(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	holds := []struct {
		in   string
		want []time.Duration
	}{
		{"0,1ms", []time.Duration{0, time.Millisecond}},
		{"10ms, 0", []time.Duration{0, 10 * time.Millisecond}},
		{"5ms", nil},
		{"x", nil},
	}
	for _, tt := range holds {
		got, err := parseHolds(tt.in)
		if (err != nil) != (tt.want == nil) || !slices.Equal(got, tt.want) {
			t.Errorf("parseHolds(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	cfg := config{Holds: []float64{0, 1}}
	if got, want := cfg.holds(), []time.Duration{0, time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("config{Holds: [0 1]}.holds() = %v; want %v", got, want)
	}
}
