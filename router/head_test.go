package router

import (
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
		{"two ids: the last wins, as in a full scan", `{"id":"a","id":"b"}`, true, `"b"`, false},
		{"an id after the result replaces the first", `{"id":1,"result":2,"id":3}`, true, `3`, false},
		{"a later id cut by head's end", `{"id":1,"result":2,"id":"ab`, false, ``, false},
		{"a later number id cut by head's end", `{"id":1,"result":2,"id":34`, false, ``, false},
		{"no id: a push", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":{`, false, ``, false},
		{"escaped id name", `{"\u0069d":4,"result":1`, false, ``, false},
		{"not an object", `"x"`, false, ``, false},
		{"empty", ``, false, ``, false},
		{"nested array", `[[{"id":1}]]`, false, ``, false},
		{"cut in a member before the id", `{"jsonrpc":"2.`, false, ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, inArray, ok := TruncatedResponseID([]byte(tt.head))
			if ok != tt.ok || (ok && (string(id.In([]byte(tt.head))) != tt.id || inArray != tt.inArray)) {
				t.Fatalf("TruncatedResponseID(%q) = %q, array %v, ok %v; want %q, %v, %v", tt.head, id.In([]byte(tt.head)), inArray, ok, tt.id, tt.inArray, tt.ok)
			}
		})
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
	f.Fuzz(func(t *testing.T, head []byte) {
		id, _, ok := TruncatedResponseID(head)
		if !ok {
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
		if full := fr.Messages[0].ID; full != id {
			t.Fatalf("%q: truncated scan found id %+v, full scan %+v", head, id, full)
		}
	})
}
