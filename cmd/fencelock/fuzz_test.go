package main

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

// errNoBackend stands in for the backend: the fuzzed command line is
// parsed and checked, and stops where it would connect.
var errNoBackend = errors.New("no backend in this test")

const envURL = "etcd://127.0.0.1:1/fuzz"

// FuzzArgs runs arbitrary command lines (arguments separated by newlines)
// up to the point where a backend would be opened. Whatever the input, the
// command must exit with 0 (help), 2 (bad usage) or, once it got as far as
// opening the backend, 1; print exactly one "fencelock: " line on stderr
// when it fails and nothing on stdout unless it prints the usage; and hand
// the backend the --identity it was given, in a URL that parses.
func FuzzArgs(f *testing.F) {
	for _, s := range []string{
		"holder\na",
		"--url\netcd://127.0.0.1:2379\nholder\njobs/nightly",
		"--identity\nme\nleader\na\n--watch",
		"run\n--lock\na\n--try\n--\ntrue",
		"run\n--lock\na\n--wait\n1s\n--\nsh\n-c\nexit 3",
		"run\n--lock\na b\n--\ntrue",
		"--timeout\n-1s\nholder\na",
		"holder\n--url=zk://h:1/x?identity=you\n--identity=me\na",
		"help",
		"-h",
		"",
		"run\n--grace\n0s\n--lock\na\n--\ntrue",
		"--url\nzk://u:pw@h:1/%zz\n--identity\nx\nholder\na",
		"run\n--shared\n--lock\na\n--try\n--\ntrue",
		"run\n--limit\n3\n--lock\na\n--wait\n1s\n--\ntrue",
		"run\n--shared\n--limit=2\n--lock\na\n--\ntrue",
		"run\n--limit\n0\n--lock\na\n--\ntrue",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		args := strings.Split(in, "\n")
		if in == "" {
			args = nil
		}
		var stdout, stderr bytes.Buffer
		var opened []string
		a := &app{
			stdin:  strings.NewReader(""),
			stdout: &stdout,
			stderr: &stderr,
			getenv: func(k string) string {
				if k == "FENCELOCK_URL" {
					return envURL
				}
				return ""
			},
			openURL: func(ctx context.Context, raw string) (lock.Locker, error) {
				opened = append(opened, raw)
				return nil, errNoBackend
			},
		}
		code := a.main(context.Background(), args)
		switch code {
		case exitOK:
			if !strings.HasPrefix(stdout.String(), "Usage:") || stderr.Len() != 0 || len(opened) != 0 {
				t.Fatalf("fencelock %q = 0, stdout %.30q, stderr %q, opened %q; want only the usage", args, stdout.String(), stderr.String(), opened)
			}
			return
		case exitError:
			if len(opened) != 1 {
				t.Fatalf("fencelock %q = 1 without opening the backend (stderr %q)", args, stderr.String())
			}
		case exitUsage:
			if len(opened) != 0 {
				t.Fatalf("fencelock %q = 2 after opening the backend", args)
			}
		default:
			t.Fatalf("fencelock %q = %d; want 0, 1 or 2 (stderr %q)", args, code, stderr.String())
		}
		if stdout.Len() != 0 {
			t.Fatalf("fencelock %q: stdout %q; want nothing", args, stdout.String())
		}
		if e := stderr.String(); strings.Count(e, "\n") != 1 || !strings.HasPrefix(e, "fencelock: ") || !strings.HasSuffix(e, "\n") {
			t.Fatalf("fencelock %q: stderr %q; want one line starting with \"fencelock: \"", args, e)
		}
		for _, raw := range opened {
			if raw == envURL || slices.Contains(args, raw) || slices.ContainsFunc(args, func(a string) bool { return strings.HasSuffix(a, "="+raw) }) {
				continue // given as is; lock.Open checks it
			}
			// Otherwise the command rewrote the URL, which it does only to
			// add --identity: the result parses and carries an identity
			// that was on the command line.
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatalf("fencelock %q opened %q, which does not parse: %v", args, raw, err)
			}
			id := u.Query()["identity"]
			if len(id) != 1 || !slices.ContainsFunc(args, func(a string) bool { return a == id[0] || strings.HasSuffix(a, "="+id[0]) }) {
				t.Fatalf("fencelock %q opened %q; want one identity taken from the arguments", args, raw)
			}
		}
	})
}
