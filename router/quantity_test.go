package router

import (
	"bytes"
	"testing"
)

func TestParseQuantity(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0x1a", 26, true}, {"0X1A", 26, true}, {"0x0", 0, true}, {"0xffffffffffffffff", 1<<64 - 1, true},
		{"0x", 0, false}, {"1a", 0, false}, {"0x1g", 0, false}, {"0x10000000000000000", 0, false}, {"", 0, false},
	} {
		if got, ok := ParseQuantity(tt.in); ok != tt.ok || ok && got != tt.want {
			t.Errorf("ParseQuantity(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseQuantityJSON(t *testing.T) {
	for _, tc := range []struct {
		raw string
		n   uint64
		ok  bool
	}{
		{`"0x10"`, 16, true}, {`"0X1aF"`, 0x1af, true}, {`"0xffffffffffffffff"`, 1<<64 - 1, true},
		{`"0x"`, 0, false}, {`"0x1ffffffffffffffff"`, 0, false}, {`"10"`, 0, false}, {`0x10`, 0, false},
		{`"0xg"`, 0, false}, {`null`, 0, false}, {`""`, 0, false},
	} {
		n, ok := ParseQuantityJSON([]byte(tc.raw))
		if n != tc.n || ok != tc.ok {
			t.Errorf("ParseQuantityJSON(%s) = %d, %v; want %d, %v", tc.raw, n, ok, tc.n, tc.ok)
		}
	}
}

// FuzzParseQuantityJSON checks the allocation-free reader of a node's
// quantities (untrusted bytes) against ParseQuantity on the unquoted text:
// the same verdict and value for every string without escapes of at most
// 16 hex digits (the reader refuses longer ones, which a node never sends:
// quantities have no leading zeros).
func FuzzParseQuantityJSON(f *testing.F) {
	for _, s := range []string{`"0x0"`, `"0x1a"`, `"0X1A"`, `"0xffffffffffffffff"`, `"0x10000000000000000"`, `"0x"`, `"1a"`, `0x1`, `"0xg"`, `"0x1a`, `"\u0030x1"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, ok := ParseQuantityJSON(raw)
		if ok && (len(raw) < 5 || raw[0] != '"' || raw[len(raw)-1] != '"') {
			t.Fatalf("%q: read as %d, but it is not a quoted quantity", raw, n)
		}
		if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' || bytes.IndexByte(raw, '\\') >= 0 || len(raw) > 20 {
			return
		}
		want, wantOK := ParseQuantity(string(raw[1 : len(raw)-1]))
		if ok != wantOK || n != want {
			t.Fatalf("%q: ParseQuantityJSON = %d, %v; ParseQuantity = %d, %v", raw, n, ok, want, wantOK)
		}
	})
}
