package cluster

import (
	"fmt"
	"strings"
	"testing"
)

// recordingTB stands in for a test: it records the first Skipf or Fatalf
// instead of ending the goroutine.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Skipf(format string, args ...any) {
	if r.skipped == "" && r.fatal == "" {
		r.skipped = fmt.Sprintf(format, args...)
	}
}
func (r *recordingTB) Fatalf(format string, args ...any) {
	if r.skipped == "" && r.fatal == "" {
		r.fatal = fmt.Sprintf(format, args...)
	}
}

func TestSkipUnlessRequested(t *testing.T) {
	tests := []struct {
		env       string
		kind      Kind
		wantSkip  string // a prefix, "" for no skip
		wantFatal string // a substring, "" for no failure
	}{
		{"", Etcd, "", ""},
		{"", ZooKeeper, "", ""},
		{"etcd,zookeeper", ZooKeeper, "", ""},
		{" etcd , zookeeper ", Etcd, "", ""},
		{"etcd", Etcd, "", ""},
		{"etcd", ZooKeeper, "not requested: FENCELOCK_BACKENDS=etcd (this test needs zookeeper)", ""},
		{"zookeeper", Etcd, "not requested: FENCELOCK_BACKENDS=zookeeper (this test needs etcd)", ""},
		{"etcd,zk", Etcd, "", `unknown backend "zk"`},
		{"mysql", ZooKeeper, "", `unknown backend "mysql"`},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%q", tt.kind, tt.env), func(t *testing.T) {
			t.Setenv(BackendsEnv, tt.env)
			r := &recordingTB{TB: t}
			SkipUnlessRequested(r, tt.kind)
			if !strings.HasPrefix(r.skipped, tt.wantSkip) || (tt.wantSkip == "") != (r.skipped == "") {
				t.Errorf("SkipUnlessRequested(%s) with %s=%q skipped with %q; want %q", tt.kind, BackendsEnv, tt.env, r.skipped, tt.wantSkip)
			}
			if !strings.Contains(r.fatal, tt.wantFatal) || (tt.wantFatal == "") != (r.fatal == "") {
				t.Errorf("SkipUnlessRequested(%s) with %s=%q failed with %q; want %q", tt.kind, BackendsEnv, tt.env, r.fatal, tt.wantFatal)
			}
		})
	}
}
