package router

import (
	"errors"
	"strings"
	"testing"
)

func TestScanResponseHead(t *testing.T) {
	big := `[` + strings.Repeat(`{"a":"0x1234"},`, 1000) + `{"b":[1,2,{"c":null}]}]`
	tests := []struct {
		name   string
		frame  string
		ok     bool
		id     string
		result string
	}{
		{"geth layout", `{"jsonrpc":"2.0","id":7,"result":"0x1"}`, true, `7`, `"0x1"`},
		{"id first", `{"id":"a b","jsonrpc":"2.0","result":` + big + `}`, true, `"a b"`, big},
		{"no jsonrpc", `{"id":1,"result":{"x":[1,2]}}`, true, `1`, `{"x":[1,2]}`},
		{"spaces everywhere", " \n{ \"jsonrpc\" : \"2.0\" , \"id\" : 12 , \"result\" : [ 1 ] \r\n} \t", true, `12`, `[ 1 ]`},
		{"object id", `{"jsonrpc":"2.0","id":{"x":1},"result":1}`, true, `{"x":1}`, `1`},
		{"true", `{"id":1,"result":true}`, true, `1`, `true`},
		{"false", `{"id":1,"result":false}`, true, `1`, `false`},
		{"null", `{"id":1,"result":null}`, true, `1`, `null`},
		{"number", `{"id":1,"result":-1.5e3}`, true, `1`, `-1.5e3`},
		{"id after an object result", `{"jsonrpc":"2.0","id":1,"result":{"a":1},"id":2}`, false, "", ""},
		{"id after an array result", `{"jsonrpc":"2.0","id":1,"result":[1],"id":"b"}`, false, "", ""},
		{"number id after a string result", `{"jsonrpc":"2.0","id":1,"result":"0x1","id":2}`, false, "", ""},
		{"id after a literal result", `{"jsonrpc":"2.0","id":1,"result":null,"id":"b"}`, false, "", ""},
		{"member after a number result", `{"jsonrpc":"2.0","id":1,"result":1,"x":{}}`, false, "", ""},
		{"duplicate id, escaped", `{"id":1,"\u0069d":2,"result":1}`, false, "", ""},
		{"duplicate id, case", `{"id":1,"Id":2,"result":1}`, false, "", ""},
		{"error response", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"}}`, false, "", ""},
		{"result before id", `{"jsonrpc":"2.0","result":1,"id":1}`, false, "", ""},
		{"no id", `{"jsonrpc":"2.0","result":1}`, false, "", ""},
		{"push", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":1}}`, false, "", ""},
		{"batch", `[{"jsonrpc":"2.0","id":1,"result":1}]`, false, "", ""},
		{"duplicate id", `{"id":1,"id":2,"result":1}`, false, "", ""},
		{"duplicate jsonrpc", `{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"result":1}`, false, "", ""},
		{"lookalike member", `{"jsonrpc":"2.0","ID":1,"id":2,"result":1}`, false, "", ""},
		{"other member first", `{"x":1,"id":2,"result":1}`, false, "", ""},
		{"empty result", `{"id":1,"result":}`, false, "", ""},
		{"empty result, spaces", `{"id":1,"result": }`, false, "", ""},
		{"no closing brace", `{"id":1,"result":1`, false, "", ""},
		{"bad id", `{"id":1x,"result":1}`, false, "", ""},
		{"unterminated id", `{"id":"1,"result":1}`, false, "", ""},
		{"empty", ``, false, "", ""},
		{"empty object", `{}`, false, "", ""},
		{"only brace", `}`, false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame := []byte(tt.frame)
			m, ok := ScanResponseHead(frame)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if got := string(m.ID.In(frame)); got != tt.id {
				t.Errorf("id %q, want %q", got, tt.id)
			}
			if got := string(m.Result.In(frame)); got != tt.result {
				t.Errorf("result %.40q, want %.40q", got, tt.result)
			}
			// A well-formed frame of that shape: the full scan agrees.
			f, err := ScanUpstream(frame, nil)
			if err != nil || len(f.Messages) != 1 {
				t.Fatalf("ScanUpstream: %v, %d messages", err, len(f.Messages))
			}
			if full := f.Messages[0]; full != m {
				t.Errorf("head scan %+v, full scan %+v", m, full)
			}
		})
	}
}

func TestAllocsScanResponseHead(t *testing.T) {
	resp := []byte(benchResponse)
	var ok bool
	assertNoAllocs(t, "ScanResponseHead", func() { _, ok = ScanResponseHead(resp) })
	if !ok {
		t.Fatalf("%s: not read by its head", resp)
	}
}

// FuzzScanResponseHead: whatever the frame, the head scan does not panic,
// its spans lie in the frame, and on a frame the full scan reads as one
// object with the same id whose result is its last member, both agree.
func FuzzScanResponseHead(f *testing.F) {
	addSeeds(f)
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":[{"a":"b"}]}`))
	f.Add([]byte(`{"id":"x","result":1,"id":2}`))
	f.Add([]byte(`{"id":1,"result":1,"result":2}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		m, ok := ScanResponseHead(frame)
		if !ok {
			return
		}
		for _, sp := range []Span{m.ID, m.Result, m.Version} {
			if sp.Off < m.Start || sp.Off+sp.Len > m.End || m.End > len(frame) {
				t.Fatalf("%q: span %+v outside the message %d-%d", frame, sp, m.Start, m.End)
			}
		}
		if !m.ID.Present() || !m.Result.Present() {
			t.Fatalf("%q: ok without id or result: %+v", frame, m)
		}
		fr, err := ScanUpstream(frame, nil)
		if err != nil || fr.Batch || len(fr.Messages) != 1 {
			return
		}
		full := fr.Messages[0]
		if full.ID != m.ID || full.Result != m.Result {
			return // a later id or result, or members after the result: not that shape
		}
		if full != m {
			t.Fatalf("%q: head scan %+v, full scan %+v", frame, m, full)
		}
	})
}

func TestTruncatedResponseID(t *testing.T) {
	tests := []struct {
		name    string
		head    string
		ok      bool
		id      string
		inArray bool
	}{
		{"geth layout, cut in the result", `{"jsonrpc":"2.0","id":5,"result":"0xab`, true, `5`, false},
		{"array, cut in the first element", `[{"jsonrpc":"2.0","id":7,"result":[1,2`, true, `7`, true},
		{"spaces", " \n[ \t{ \"id\" : 12 , \"result\"", true, `12`, true},
		{"string id", `{"jsonrpc":"2.0","id":"a\"b","result":{`, true, `"a\"b"`, false},
		{"cut in the id", `{"jsonrpc":"2.0","id":"abc`, false, ``, false},
		{"cut in the number id", `{"jsonrpc":"2.0","id":12`, false, ``, false},
		{"result before the id, within head", `{"jsonrpc":"2.0","result":"0x1","id":3}`, true, `3`, false},
		{"error before the id, within head", `{"error":{"code":1},"id":3,"jsonrpc":"2.0"`, true, `3`, false},
		{"result before the id, past head", `{"jsonrpc":"2.0","result":"0x1`, false, ``, false},
		{"no id: a push", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":{`, false, ``, false},
		{"a key cut by head's end after the id", `{"id":1,"result":2,"i`, true, `1`, false},
		{"not an object", `"x"`, false, ``, false},
		{"empty", ``, false, ``, false},
		{"nested array", `[[{"id":1}]]`, false, ``, false},
		{"cut in a member before the id", `{"jsonrpc":"2.`, false, ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, inArray, err := TruncatedResponseID([]byte(tt.head))
			if ok := err == nil; ok != tt.ok || (ok && (string(id.In([]byte(tt.head))) != tt.id || inArray != tt.inArray)) {
				t.Fatalf("TruncatedResponseID(%q) = %q, array %v, err %v; want %q, %v, ok %v", tt.head, id.In([]byte(tt.head)), inArray, err, tt.id, tt.inArray, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrNoResponseID) {
				t.Errorf("err %v, want ErrNoResponseID", err)
			}
		})
	}
}

// TestTruncatedResponseIDAmbiguous: the first bytes of a message too large
// to keep that make it ambiguous, as a full scan would mark it (a member
// twice, one named like a JSON-RPC member but for case or escapes, in the
// message or the first element of an array), give no id but ErrAmbiguous:
// its -32005 must go to no one, as the message itself would not.
func TestTruncatedResponseIDAmbiguous(t *testing.T) {
	for _, head := range []string{
		`{"jsonrpc":"2.0","id":1,"id":2,"result":"0xab`,
		`{"id":"a","id":"b"}`,
		`[{"jsonrpc":"2.0","id":7,"id":8,"result":[1,2`,
		`{"id":1,"result":2,"id":3}`,
		`{"id":1,"result":2,"id":"ab`,
		`{"id":1,"result":2,"id":34`,
		`{"jsonrpc":"2.0","ID":1,"id":2,"result":"0x`,
		`{"jsonrpc":"2.0","id":2,"\u0069d":1,"result":"0x`,
		`{"\u0069d":4,"result":1`,
		`{"jsonrpc":"2.0","id":1,"result":2,"result":"0x`,
		`{"jsonrpc":"2.0","id":1,"error":{},"error":{"code`,
		`{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"result":"0x`,
		`{"jsonrpc":"2.0","id":1,"Result":2,"result":"0x`,
		`{"jsonrpc":"2.0","id":1,"params":{"subscription":"0x1","subscription":"0x2","result":"0x`,
		`{"jsonrpc":"2.0","id":1,"params":{"Subscription":"0x1","result":"0x`,
	} {
		id, _, err := TruncatedResponseID([]byte(head))
		if !errors.Is(err, ErrAmbiguous) {
			t.Errorf("TruncatedResponseID(%q) = %q, %v; want ErrAmbiguous", head, id.In([]byte(head)), err)
		}
	}
}

// FuzzTruncatedResponseID: on any bytes, an id found is a whole JSON value
// within them, and it is the id a full scan finds in every longer prefix of
// a complete response that has it.
func FuzzTruncatedResponseID(f *testing.F) {
	addSeeds(f)
	f.Add([]byte(`{"jsonrpc":"2.0","id":5,"result":"0xab`))
	f.Add([]byte(`[{"jsonrpc":"2.0","id":"x","result":[1,2`))
	f.Add([]byte(`{"result":1,"id":2}`))
	f.Add([]byte(`{"id":1,"id":2,"result":"0x`))
	f.Add([]byte(`[{"id":1,"ID":2,"result":[`))
	f.Fuzz(func(t *testing.T, head []byte) {
		id, _, err := TruncatedResponseID(head)
		if err != nil {
			if !errors.Is(err, ErrAmbiguous) && !errors.Is(err, ErrNoResponseID) {
				t.Fatalf("%q: error %v wraps no sentinel", head, err)
			}
			if fr, serr := ScanUpstream(head, nil); errors.Is(err, ErrAmbiguous) && serr == nil && !fr.Batch && !errors.Is(fr.Messages[0].Invalid, ErrAmbiguous) {
				t.Fatalf("%q: ambiguous to the truncated scan (%v), not to the full scan", head, err)
			}
			return
		}
		if id.Off < 0 || id.Len <= 0 || id.Off+id.Len > len(head) {
			t.Fatalf("%q: id span %+v outside the input", head, id)
		}
		if end, err := skipValue(head, id.Off, 1); err != nil || end != id.Off+id.Len {
			t.Fatalf("%q: id %q is not one JSON value", head, id.In(head))
		}
		fr, err := ScanUpstream(head, nil)
		if err != nil || fr.Batch || len(fr.Messages) != 1 || !fr.Messages[0].HasID() {
			return
		}
		if full := fr.Messages[0]; full.ID != id || full.Invalid != nil {
			t.Fatalf("%q: truncated scan found id %+v, full scan %+v (%v)", head, id, full.ID, full.Invalid)
		}
	})
}
