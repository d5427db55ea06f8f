package lock_test

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

// BenchmarkValidateName measures the name check every backend runs on every
// call. A valid name must not allocate; an invalid one allocates its error.
func BenchmarkValidateName(b *testing.B) {
	long := strings.Repeat("segment-0123456789/", 14) + "last"
	benchmarks := []struct {
		name  string
		input string
		ok    bool
	}{
		{"short", "jobs", true},
		{"typical", "tenant:42/jobs/nightly-report", true},
		{"max-len", long[:lock.MaxNameLen], true},
		{"invalid-byte", "jobs/night ly", false},
		{"invalid-dotdot", "jobs/../etc", false},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			if err := lock.ValidateName(bm.input); (err == nil) != bm.ok {
				b.Fatalf("ValidateName(%q) = %v; want ok=%v", bm.input, err, bm.ok)
			}
			if bm.ok {
				if n := testing.AllocsPerRun(100, func() { _ = lock.ValidateName(bm.input) }); n != 0 {
					b.Fatalf("ValidateName(%q) allocates %v times; want 0", bm.input, n)
				}
			}
			b.SetBytes(int64(len(bm.input)))
			b.ReportAllocs()
			for b.Loop() {
				_ = lock.ValidateName(bm.input)
			}
		})
	}
}
