package router

import (
	"bytes"
	"strings"
	"testing"
)

func TestIDFinder(t *testing.T) {
	big := strings.Repeat("ab", 5000)
	tests := []struct {
		name string
		msg  string
		id   string // "" when none can be told
	}{
		{"viem layout", `{"jsonrpc":"2.0","id":42,"method":"web3_sha3","params":["0x` + big + `"]}`, `42`},
		{"ethers layout: id after params", `{"method":"web3_sha3","params":["0x` + big + `"],"id":7,"jsonrpc":"2.0"}`, `7`},
		{"string id with escapes", `{"params":[{"id":1,"x":"}\"{"}],"id":"a\"b\\","method":"x"}`, `"a\"b\\"`},
		{"id last, spaces", "{ \"method\" : \"x\" , \"id\" : 12 \n}", `12`},
		{"null id", `{"id":null,"method":"x"}`, `null`},
		{"nested ids are not the request's", `{"method":"x","params":{"id":5,"a":[{"id":6}]}}`, ``},
		{"id in a string is not a member", `{"method":"x","params":["\"id\":9"]}`, ``},
		{"escaped member name", `{"\u0069d":3,"method":"x"}`, ``},
		{"escaped id after the id", `{"id":7,"\u0069d":5,"method":"x"}`, ``},
		{"escaped id before the id", `{"\u0069d":5,"id":7,"method":"x"}`, ``},
		{"escapes in a value are fine", `{"method":"x\u0069","id":7}`, `7`},
		{"duplicate id", `{"id":1,"id":2,"method":"x"}`, ``},
		{"batch", `[{"id":1,"method":"x"}]`, ``},
		{"not json", `hello`, ``},
		{"cut short", `{"id":1,"method":"x"`, ``},
		{"object id: not one to echo", `{"id":{"a":1},"method":"x"}`, ``},
		{"bool id", `{"id":true,"method":"x"}`, ``},
		{"broken number", `{"id":12x,"method":"x"}`, ``},
		{"longer name", `{"idx":1,"method":"x"}`, ``},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 3, 1 << 20} {
			var f IDFinder
			for b := []byte(tt.msg); len(b) > 0; {
				n := min(chunk, len(b))
				f.Write(b[:n])
				b = b[n:]
			}
			id, ok := f.ID()
			if ok != (tt.id != "") || string(id) != tt.id {
				t.Errorf("%s, chunks of %d: id %q ok %v, want %q", tt.name, chunk, id, ok, tt.id)
			}
		}
	}
}

// FuzzIDFinder: for any message the scanner reads as one request with a
// valid id, the finder, fed in pieces, finds no other id, and finds that
// one byte for byte when the message has no escape; on anything it never
// panics.
func FuzzIDFinder(f *testing.F) {
	addSeeds(f)
	f.Add([]byte(`{"method":"x","params":["a"],"id":"b"}`))
	f.Add([]byte(`{"id":1,"params":{"id":2}}`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		var fd IDFinder
		step := len(msg)%7 + 1 // pieces of 1 to 7 bytes
		for b := msg; len(b) > 0; {
			n := min(step, len(b))
			fd.Write(b[:n])
			b = b[n:]
		}
		id, ok := fd.ID()
		fr, err := ScanClient(msg, nil)
		if err != nil || fr.Batch || len(fr.Messages) != 1 {
			return
		}
		m := fr.Messages[0]
		if m.Invalid != nil || !m.HasID() || m.Ignored {
			return
		}
		want := m.ID.In(msg)
		// Never another id than the scanner's; and the scanner's whenever
		// no member name could be escaped (the finder then gives up).
		if (ok && !bytes.Equal(id, want)) || (!ok && !bytes.Contains(msg, []byte{'\\'})) {
			t.Fatalf("%q: finder %q ok %v, scanner %q", msg, id, ok, want)
		}
	})
}
