package main

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/lock"
)

// TestSecureSettings checks how the TLS and credential flags and their
// environment variables become URL keys: a flag wins over its variable,
// the password only ever travels as the name of its variable, and a
// setting the URL gives as well is a usage error.
func TestSecureSettings(t *testing.T) {
	const base = "etcd://127.0.0.1:2379/app"
	tests := []struct {
		name     string
		url      string
		env      map[string]string
		args     []string
		wantCode int               // exitUsage, or 0 when the URL reaches Open
		want     map[string]string // query keys expected in the URL given to Open
		wantUser string
	}{{
		name: "nothing added", url: base, want: map[string]string{},
	}, {
		name: "flags", url: base,
		args: []string{"--ca-file", "/c/ca.pem", "--cert-file", "/c/me.pem", "--key-file", "/c/me.key", "--server-name", "etcd.local"},
		want: map[string]string{"ca_file": "/c/ca.pem", "cert_file": "/c/me.pem", "key_file": "/c/me.key", "server_name": "etcd.local"},
	}, {
		name: "environment", url: base,
		env:  map[string]string{"FENCELOCK_CA_FILE": "/e/ca.pem", "FENCELOCK_USER": "app"},
		want: map[string]string{"ca_file": "/e/ca.pem", "password_env": "FENCELOCK_PASSWORD"}, wantUser: "app",
	}, {
		name: "flag wins over environment", url: base,
		env:  map[string]string{"FENCELOCK_CA_FILE": "/e/ca.pem", "FENCELOCK_USER": "envuser"},
		args: []string{"--ca-file", "/f/ca.pem", "--user", "flaguser"},
		want: map[string]string{"ca_file": "/f/ca.pem", "password_env": "FENCELOCK_PASSWORD"}, wantUser: "flaguser",
	}, {
		name: "key in the URL too", url: base + "?ca_file=/u/ca.pem",
		args: []string{"--ca-file", "/f/ca.pem"}, wantCode: exitUsage,
	}, {
		name: "user in the URL too", url: "etcd://u@127.0.0.1:2379/app?password_env=X",
		args: []string{"--user", "app"}, wantCode: exitUsage,
	}, {
		name: "password_env in the URL too", url: base + "?password_env=X",
		env: map[string]string{"FENCELOCK_USER": "app"}, wantCode: exitUsage,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *url.URL
			open := func(ctx context.Context, raw string) (lock.Locker, error) {
				u, err := url.Parse(raw)
				if err != nil {
					t.Fatalf("Open(%q): %v", raw, err)
				}
				got = u
				return nil, errors.New("stop here")
			}
			var stdout, stderr bytes.Buffer
			a := &app{
				openURL: open, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
				getenv: func(k string) string {
					if k == "FENCELOCK_URL" {
						return tt.url
					}
					return tt.env[k]
				},
			}
			code := a.main(context.Background(), append(tt.args, "holder", "x"))
			if tt.wantCode != 0 {
				if code != tt.wantCode || got != nil {
					t.Fatalf("main() = %d (opened %v), stderr %q; want %d without opening", code, got, stderr.String(), tt.wantCode)
				}
				return
			}
			if got == nil {
				t.Fatalf("main() = %d, stderr %q; want the URL given to Open", code, stderr.String())
			}
			q := got.Query()
			for k, v := range tt.want {
				if q.Get(k) != v {
					t.Errorf("URL key %s = %q; want %q (URL %s)", k, q.Get(k), v, got.Redacted())
				}
			}
			for k := range q {
				if _, ok := tt.want[k]; !ok {
					t.Errorf("URL has key %s; want only %v", k, tt.want)
				}
			}
			if user := got.User.Username(); user != tt.wantUser {
				t.Errorf("URL user = %q; want %q", user, tt.wantUser)
			}
			if _, has := got.User.Password(); has {
				t.Errorf("URL carries a password; want only the name of its variable")
			}
		})
	}
}
