package fenced

import (
	"bytes"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/internal/sentinel"
)

func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "00000000000000000042:hello", "00000000000000000000:", "18446744073709551615:x", "18446744073709551616:x", "99999999999999999999:", "0000000000000000004a:x", "42:x", "00000000000000000042", "00000000000000000042;x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stored []byte) {
		tok, val, err := Decode(stored)
		if err != nil {
			if !errors.Is(err, sentinel.InvalidToken) {
				t.Fatalf("Decode(%q) = %v; want an error wrapping %v", stored, err, sentinel.InvalidToken)
			}
			return
		}
		if len(stored) == 0 {
			if tok != 0 || len(val) != 0 {
				t.Fatalf("Decode(empty) = %d, %q; want 0, nothing", tok, val)
			}
			return
		}
		// Accepted: the stored form is exactly the encoding of what it
		// decodes to.
		if again := Encode(tok, val); !bytes.Equal(again, stored) {
			t.Fatalf("Decode(%q) = %d, %q, which encodes to %q", stored, tok, val, again)
		}
	})
}

func FuzzEncode(f *testing.F) {
	f.Add(uint64(42), uint64(43), []byte("hello"))
	f.Add(uint64(0), uint64(1<<64-1), []byte{})
	f.Add(uint64(9), uint64(10), []byte(":\x00"))
	f.Fuzz(func(t *testing.T, a, b uint64, value []byte) {
		enc := Encode(a, value)
		tok, val, err := Decode(enc)
		if err != nil || tok != a || !bytes.Equal(val, value) {
			t.Fatalf("Decode(Encode(%d, %q)) = %d, %q, %v; want the same back", a, value, tok, val, err)
		}
		// Byte order is token order, whatever the values: etcd compares
		// stored values against a bare header.
		ea, eb := Encode(a, value), Encode(b, nil)
		if c := bytes.Compare(ea[:HeaderDigits+1], eb); (c < 0) != (a < b) || (c == 0) != (a == b) {
			t.Fatalf("headers of %d and %d compare %d", a, b, c)
		}
		if a < b && bytes.Compare(ea, eb) >= 0 {
			t.Fatalf("Encode(%d, %q) sorts after the bare header of %d", a, value, b)
		}
	})
}
