package mux

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// calls are the elements with an id.
func calls(elems []fakeReq) []fakeReq {
	var out []fakeReq
	for _, e := range elems {
		if !e.IsNotification() {
			out = append(out, e)
		}
	}
	return out
}

// wantFourElementEchoes checks the answers to fourElementBatch: each of its
// three calls echoed once, under its own id.
func wantFourElementEchoes(t *testing.T, got []resp) {
	t.Helper()
	want := map[string]string{`1`: `["a"]`, `"x"`: `["b"]`, `3`: `["c"]`}
	for _, r := range got {
		p, ok := want[string(r.ID)]
		if !ok {
			t.Fatalf("unexpected or repeated answer %s", r.Raw)
		}
		delete(want, string(r.ID))
		wantEcho(t, r, string(r.ID), r.echoMethod(), p)
	}
}

const fourElementBatch = `[
	{"jsonrpc":"2.0","id":1,"method":"eth_a","params":["a"]},
	{"jsonrpc":"2.0","method":"eth_note","params":["n"]},
	{"jsonrpc":"2.0","id":"x","method":"eth_b","params":["b"]},
	{"jsonrpc":"2.0","id":3,"method":"eth_c","params":["c"]}
]`

// TestUpstreamArrays: a client batch reaches the node as one array in the
// client's order, and whatever the node does with the array, every element
// gets exactly its own answer or a clear error.
func TestUpstreamArrays(t *testing.T) {
	t.Parallel()

	t.Run("answered as one reversed array", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		h.fake.SetArrayHandler(func(fc *fakeConn, elems []fakeReq) {
			cs := calls(elems)
			var answers [][]byte
			for i := len(cs) - 1; i >= 0; i-- {
				answers = append(answers, echo(cs[i]))
			}
			fc.Send(arrayFrame(answers))
		})
		c := h.dial(t)
		got := parseBatch(t, c.call(fourElementBatch))
		if len(got) != 3 {
			t.Fatalf("got %d answers, want 3", len(got))
		}
		wantFourElementEchoes(t, got)
		reqs := h.fake.Received()
		if len(reqs) != 4 || reqs[0].Array != 4 {
			t.Fatalf("upstream got %d messages, first in an array of %d; want one array of 4", len(reqs), reqs[0].Array)
		}
		for i, m := range []string{"eth_a", "eth_note", "eth_b", "eth_c"} {
			if reqs[i].Method != m || reqs[i].Index != i || reqs[i].Frame != reqs[0].Frame {
				t.Errorf("upstream element %d: %s at %d of frame %d, want %s at %d of frame %d", i, reqs[i].Method, reqs[i].Index, reqs[i].Frame, m, i, reqs[0].Frame)
			}
		}
	})

	// geth refuses an array over --rpc.batch-request-limit with one error,
	// alone in an array, under the first call's id: every element gets it.
	t.Run("batch too large", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		h.fake.SetArrayHandler(func(fc *fakeConn, elems []fakeReq) {
			fc.Send(arrayFrame([][]byte{[]byte(`{"jsonrpc":"2.0","id":` + string(calls(elems)[0].ID) + `,"error":{"code":-32600,"message":"batch too large","data":{"limit":2}}}`)}))
		})
		c := h.dial(t)
		got := parseBatch(t, c.call(fourElementBatch))
		if len(got) != 3 {
			t.Fatalf("got %d answers, want 3", len(got))
		}
		ids := map[string]bool{}
		for _, r := range got {
			ids[string(r.ID)] = true
			wantError(t, r, string(r.ID), -32600, "batch too large")
			if string(r.Error.Data) != `{"limit":2}` {
				t.Errorf("id %s: data %s, want the node's", r.ID, r.Error.Data)
			}
		}
		if !ids[`1`] || !ids[`"x"`] || !ids[`3`] {
			t.Errorf("answers for %v, want 1, \"x\", 3", ids)
		}
		if n := h.pendingLen(); n != 0 {
			t.Errorf("%d requests still pending", n)
		}
		c.barrier()
	})

	// A node may answer each call of an array in an array of its own: the
	// first call's ordinary error stays its own (only -32600 refuses the
	// whole array).
	t.Run("arrays of one, first an error", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		h.fake.SetArrayHandler(func(fc *fakeConn, elems []fakeReq) {
			cs := calls(elems)
			fc.Send(arrayFrame([][]byte{errorFrame(cs[0].ID, 3, "execution reverted")}))
			for _, r := range cs[1:] {
				fc.Send(arrayFrame([][]byte{echo(r)}))
			}
		})
		c := h.dial(t)
		got := batchByID(t, c.call(fourElementBatch))
		wantError(t, got[`1`], `1`, 3, "execution reverted")
		wantEcho(t, got[`"x"`], `"x"`, "eth_b", `["b"]`)
		wantEcho(t, got[`3`], `3`, "eth_c", `["c"]`)
		if n := h.srv.Metrics().DroppedCount(DropUnknownID); n != 0 {
			t.Errorf("unknown_id drops = %v, want 0", n)
		}
	})

	// A lone id:null object cannot be told apart on a shared socket: it is
	// dropped, and the batch's elements time out; nobody else is touched.
	t.Run("lone id null", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.RequestTimeout = 500 * time.Millisecond }})
		h.fake.SetArrayHandler(func(fc *fakeConn, elems []fakeReq) {
			fc.Send([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid batch"}}`))
		})
		c, other := h.dial(t), h.dial(t)
		c.send(fourElementBatch)
		wantEcho(t, parseResp(t, other.call(`{"jsonrpc":"2.0","id":7,"method":"eth_o","params":[7]}`)), `7`, "eth_o", `[7]`)
		got := parseBatch(t, c.recv())
		if len(got) != 3 {
			t.Fatalf("got %d answers, want 3", len(got))
		}
		for _, r := range got {
			wantError(t, r, string(r.ID), -32002, "request timed out")
		}
		if n := h.srv.Metrics().DroppedCount(DropNullID); n != 1 {
			t.Errorf("null_id drops = %v, want 1", n)
		}
	})

	// A node that repeats an id in its array: the repeat is dropped, the
	// element it stood for times out, nobody gets two answers.
	t.Run("repeated id in the array", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.RequestTimeout = 500 * time.Millisecond }})
		h.fake.SetArrayHandler(func(fc *fakeConn, elems []fakeReq) {
			cs := calls(elems)
			fc.Send(arrayFrame([][]byte{echo(cs[0]), echo(cs[0]), echo(cs[2])}))
		})
		c := h.dial(t)
		got := batchByID(t, c.call(fourElementBatch))
		wantEcho(t, got[`1`], `1`, "eth_a", `["a"]`)
		wantError(t, got[`"x"`], `"x"`, -32002, "request timed out")
		wantEcho(t, got[`3`], `3`, "eth_c", `["c"]`)
		if n := h.srv.Metrics().DroppedCount(DropUnknownID); n != 1 {
			t.Errorf("unknown_id drops = %v, want 1 (the repeat)", n)
		}
	})

	// Past UpstreamMaxBatch the batch goes as consecutive arrays, each
	// sent once the previous one is answered.
	t.Run("upstream max batch", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.UpstreamMaxBatch = 2 }})
		var held []fakeReq
		var mu sync.Mutex
		h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
			if r.Frame == 1 && r.Array > 0 {
				// The first array waits for the test's word.
				mu.Lock()
				held = append(held, r)
				mu.Unlock()
				return
			}
			fc.Answer(r)
		})
		c, other := h.dial(t), h.dial(t)
		c.send(`[
			{"jsonrpc":"2.0","id":1,"method":"eth_1","params":[1]},
			{"jsonrpc":"2.0","id":2,"method":"eth_2","params":[2]},
			{"jsonrpc":"2.0","id":3,"method":"eth_3","params":[3]},
			{"jsonrpc":"2.0","id":4,"method":"eth_4","params":[4]},
			{"jsonrpc":"2.0","id":5,"method":"eth_5","params":[5]}
		]`)
		h.fake.Conn(t, 1).WaitReqs(t, 2)
		// Another client's request goes after anything muxd wrote
		// before it; once it is answered, a second array sent too early
		// would have arrived.
		wantEcho(t, parseResp(t, other.call(`{"jsonrpc":"2.0","id":7,"method":"eth_o","params":[7]}`)), `7`, "eth_o", `[7]`)
		if n := len(h.fake.Received()); n != 3 {
			t.Fatalf("node received %d messages before the first array was answered, want 3 (2 + the other client's)", n)
		}
		mu.Lock()
		fc := h.fake.Conn(t, 1)
		for _, r := range held {
			fc.Answer(r)
		}
		mu.Unlock()
		got := parseBatch(t, c.recv())
		if len(got) != 5 {
			t.Fatalf("got %d answers, want 5", len(got))
		}
		reqs := h.fake.Received()
		var shape []int
		var methods []string
		for _, r := range reqs {
			if r.Method == "eth_o" {
				continue
			}
			methods = append(methods, r.Method)
			if r.Index == 0 {
				shape = append(shape, r.Array)
			}
		}
		if got, want := strings.Join(methods, ","), "eth_1,eth_2,eth_3,eth_4,eth_5"; got != want {
			t.Errorf("node got %s, want %s", got, want)
		}
		if got, want := jsonOf(shape), `[2,2,0]`; got != want {
			t.Errorf("arrays of %s, want %s (the last alone)", got, want)
		}
	})

	t.Run("waits for an upstream as one array", func(t *testing.T) {
		t.Parallel()
		h, g := gatedHarness(t, false, nil)
		g.waitFails(t, 1)
		c := h.dial(t)
		c.send(fourElementBatch)
		eventually(t, "batch waiting", func() bool { return h.waitingLen() == 3 })
		g.set(true)
		if got := parseBatch(t, c.recv()); len(got) != 3 {
			t.Fatalf("got %d answers, want 3", len(got))
		}
		// The notification was dropped while no upstream was up (as a
		// lone one is); the calls went as one array, in order.
		reqs := h.fake.Conn(t, 1).Reqs()
		if len(reqs) != 3 || reqs[0].Array != 3 || reqs[0].Method != "eth_a" || reqs[1].Method != "eth_b" || reqs[2].Method != "eth_c" {
			t.Errorf("node got %s", describe(reqs))
		}
	})

	// The socket drops with an array in flight: retry-list elements go
	// again as one array, in order, under the same upstream ids; the
	// others get -32002 at once.
	t.Run("dropped in flight", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		h.fake.SetArrayHandler(func(fc *fakeConn, elems []fakeReq) {
			if fc.N == 1 {
				fc.Drop()
				return
			}
			for _, r := range calls(elems) {
				fc.Answer(r)
			}
		})
		c := h.dial(t)
		c.send(`[
			{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[1]},
			{"jsonrpc":"2.0","id":2,"method":"eth_sendRawTransaction","params":[2]},
			{"jsonrpc":"2.0","id":3,"method":"eth_blockNumber","params":[3]}
		]`)
		got := batchByID(t, c.recv())
		wantEcho(t, got[`1`], `1`, "eth_chainId", `[1]`)
		wantError(t, got[`2`], `2`, -32002, "upstream unavailable")
		wantEcho(t, got[`3`], `3`, "eth_blockNumber", `[3]`)
		first, second := h.fake.Conn(t, 1).Reqs(), h.fake.Conn(t, 2).Reqs()
		if len(first) != 3 || len(second) != 2 || second[0].Array != 2 {
			t.Fatalf("first connection got %s, second %s; want 3, then the 2 retried in one array", describe(first), describe(second))
		}
		if string(second[0].ID) != string(first[0].ID) || string(second[1].ID) != string(first[2].ID) {
			t.Errorf("retried under ids %s %s, want %s %s", second[0].ID, second[1].ID, first[0].ID, first[2].ID)
		}
	})
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func describe(reqs []fakeReq) string {
	var parts []string
	for _, r := range reqs {
		parts = append(parts, r.Method+"@"+string(r.ID)+"/"+jsonOf([]int{r.Frame, r.Index, r.Array}))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// batchByID decodes a frame that must be a JSON array of answers, keyed
// by their ids as written.
func batchByID(t *testing.T, b []byte) map[string]resp {
	t.Helper()
	got := map[string]resp{}
	for _, r := range parseBatch(t, b) {
		got[string(r.ID)] = r
	}
	return got
}
