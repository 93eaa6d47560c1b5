package router

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"testing"
)

func TestErrorCode(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		ok   bool
	}{
		{`{"code":-32000,"message":"filter not found"}`, -32000, true},
		{` { "message" : "x" , "code" : 3 , "data" : "0x" } `, 3, true},
		{`{"data":{"code":1},"code":2}`, 2, true}, // a nested "code" is not the error's
		{`{"code":-0}`, 0, true},
		{`{"message":"no code"}`, 0, false},
		{`{"code":"-32000"}`, 0, false},
		{`{"code":1.5}`, 0, false},
		{`{"code":1e3}`, 0, false},
		{`{"code":1234567890123456789}`, 0, false}, // past 18 digits
		{`[{"code":1}]`, 0, false},
		{`{"code":`, 0, false},
		{``, 0, false},
	} {
		if got, ok := ErrorCode([]byte(tt.in)); got != tt.want || ok != tt.ok {
			t.Errorf("ErrorCode(%s) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// smallInt is what ErrorCode reads as a code: a JSON integer of at most 18
// digits (JSON-RPC codes have 5 or fewer).
var smallInt = regexp.MustCompile(`^-?[0-9]{1,18}$`)

// FuzzErrorCode checks the reader of a node's error code (untrusted bytes)
// against encoding/json: for a valid object without escapes whose only
// "code" is its own member, ErrorCode reads that member exactly when it is
// a small integer, and then as strconv does.
func FuzzErrorCode(f *testing.F) {
	for _, s := range []string{`{"code":-32000,"message":"filter not found"}`, `{"code":3,"message":"execution reverted","data":"0x08c379a0"}`,
		`{"data":{"code":1},"code":2}`, `{"code":"1"}`, `{"code":1.5}`, `{"code":1234567890123456789}`, `{"message":"x"}`, `[1]`, `{"code":`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		n, ok := ErrorCode(in)
		if !json.Valid(in) || bytes.IndexByte(in, '\\') >= 0 || bytes.Count(in, []byte(`"code"`)) != 1 {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(in, &m) != nil {
			if ok {
				t.Fatalf("%s: not an object, but code %d read", in, n)
			}
			return
		}
		raw, present := m["code"]
		if !present {
			if ok {
				t.Fatalf("%s: no code member, but code %d read", in, n)
			}
			return
		}
		if !smallInt.Match(raw) {
			if ok {
				t.Fatalf("%s: code %s is not a small integer, but %d read", in, raw, n)
			}
			return
		}
		want, err := strconv.Atoi(string(raw))
		if err != nil || !ok || n != want {
			t.Fatalf("%s: ErrorCode = %d, %v; want %d (%v)", in, n, ok, want, err)
		}
	})
}
