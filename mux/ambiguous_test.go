package mux

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAmbiguousAnswers: the node answers a request with its id member
// twice, or once more in a spelling Go's encoding/json reads as the id, the
// other id naming another client's request in flight. Parsers disagree on
// which one counts, so the frame is nobody's answer: on every scan path
// (small, a large answer routed by its head, one past upstream_read_limit,
// an element of an array) it is dropped and counted malformed, neither
// client gets the other's result, the request the node answers for real
// gets that answer, and the other -32002 at its deadline. In an array the
// other elements are delivered.
func TestAmbiguousAnswers(t *testing.T) {
	t.Parallel()
	const readLimit = 1<<20 + 7
	// result is a JSON string result of about n bytes that names whose it is.
	result := func(whose string, n int) string {
		return `"` + whose + strings.Repeat("0", max(0, n-len(whose))) + `"`
	}
	dupID := func(own, other []byte, res string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":` + string(own) + `,"id":` + string(other) + `,"result":` + res + `}`)
	}
	for _, tc := range []struct {
		name string
		size int // of each result
		// answer is the node's frame for request own, naming other too.
		answer func(own, other []byte, res string) []byte
		batch  bool // client a sends a batch of two, one answered in the array with the ambiguous one
	}{
		{name: "small", size: 16, answer: dupID},
		{name: "small, id in upper case", size: 16, answer: func(own, other []byte, res string) []byte {
			return []byte(`{"jsonrpc":"2.0","ID":` + string(own) + `,"id":` + string(other) + `,"result":` + res + `}`)
		}},
		{name: "small, id escaped", size: 16, answer: func(own, other []byte, res string) []byte {
			return []byte(`{"jsonrpc":"2.0","\u0069d":` + string(own) + `,"id":` + string(other) + `,"result":` + res + `}`)
		}},
		{name: "large", size: 64 << 10, answer: dupID},
		{name: "large, id after the result", size: 64 << 10, answer: func(own, other []byte, res string) []byte {
			return []byte(`{"jsonrpc":"2.0","id":` + string(other) + `,"result":` + res + `,"id":` + string(own) + `}`)
		}},
		{name: "past upstream_read_limit", size: readLimit, answer: dupID},
		{name: "array element", size: 16, answer: dupID, batch: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, harnessOpts{cfg: func(c *Config) {
				c.UpstreamReadLimit = readLimit
				c.RequestTimeout = 2 * time.Second
			}})
			want := 2 // calls of method eth_amb the node holds before it answers
			if tc.batch {
				want = 3
			}
			var (
				mu   sync.Mutex
				held = map[string]fakeReq{} // by params
			)
			h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
				if r.Method != "eth_amb" {
					fc.Answer(r)
					return
				}
				mu.Lock()
				held[compact(r.Params)] = r
				all := len(held) == want
				mu.Unlock()
				if !all {
					return
				}
				a, b := held[`["a"]`], held[`["b"]`]
				forA := tc.answer(a.ID, b.ID, result("result-of-a", tc.size))
				if tc.batch {
					forA = arrayFrame([][]byte{forA, resultFrame(held[`["a2"]`].ID, `"result-of-a2"`)})
				}
				fc.Send(forA)
				fc.Send(tc.answer(b.ID, a.ID, result("result-of-b", tc.size)))
				fc.Send(resultFrame(a.ID, `"real-a"`))
			})
			ca, cb := h.dial(t), h.dial(t)
			callA := `{"jsonrpc":"2.0","id":"a","method":"eth_amb","params":["a"]}`
			if tc.batch {
				callA = `[` + callA + `,{"jsonrpc":"2.0","id":"a2","method":"eth_amb","params":["a2"]}]`
			}
			ca.send(callA)
			cb.send(`{"jsonrpc":"2.0","id":"b","method":"eth_amb","params":["b"]}`)

			gotA := ca.recv()
			if strings.Contains(string(gotA), "result-of-b") {
				t.Fatalf("client a got b's result: %.200s", gotA)
			}
			if tc.batch {
				byID := map[string]resp{}
				for _, r := range parseBatch(t, gotA) {
					byID[string(r.ID)] = r
				}
				if r := byID[`"a"`]; string(r.Result) != `"real-a"` {
					t.Errorf("call a: %s, want the node's real answer", r.Raw)
				}
				if r := byID[`"a2"`]; string(r.Result) != `"result-of-a2"` {
					t.Errorf("call a2, answered in the array beside the ambiguous element: %s", r.Raw)
				}
			} else if r := parseResp(t, gotA); string(r.ID) != `"a"` || string(r.Result) != `"real-a"` {
				t.Errorf("client a: %.200s, want the node's real answer", gotA)
			}
			gotB := cb.recv()
			if strings.Contains(string(gotB), "result-of-a") {
				t.Fatalf("client b got a's result: %.200s", gotB)
			}
			wantError(t, parseResp(t, gotB), `"b"`, -32002, "request timed out")
			ca.barrier()
			cb.barrier()
			if n := h.srv.Metrics().DroppedCount(DropMalformed); n != 2 {
				t.Errorf("malformed drops = %v, want 2", n)
			}
			if n := h.fake.NumConns(); n != 1 {
				t.Errorf("upstream connections %d, want 1", n)
			}
		})
	}
}
