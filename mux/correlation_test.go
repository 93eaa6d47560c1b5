package mux

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// upstreamIDPattern is what muxd's own ids look like on the upstream.
var upstreamIDPattern = regexp.MustCompile(`^[1-9][0-9]*$`)

// TestIDByteIdentity: every id comes back exactly as the client wrote it,
// alone and inside a batch, while the upstream only ever sees muxd's own
// decimal ids.
func TestIDByteIdentity(t *testing.T) {
	t.Parallel()
	ids := []string{
		`1`, `"1"`, `1.0`, `18446744073709551616`, `"a\"b"`, `null`, `-0`, `1e2`,
		`0`, `-1`, `1E+2`, `""`, `"\u00e9"`, `"é"`, `123456789012345678901234567890.5e-7`, `"0x01"`,
	}
	h := newHarness(t, harnessOpts{})
	c := h.dial(t)
	for i, id := range ids {
		t.Run("single/"+id, func(t *testing.T) {
			params := fmt.Sprintf(`["single-%d"]`, i)
			r := parseResp(t, c.call(`{"jsonrpc":"2.0","id":`+id+`,"method":"eth_echo","params":`+params+`}`))
			wantEcho(t, r, id, "eth_echo", params)
		})
	}
	t.Run("batch", func(t *testing.T) {
		var elems []string
		want := map[string]string{} // params -> id
		for i, id := range ids {
			params := fmt.Sprintf(`["batch-%d"]`, i)
			elems = append(elems, `{"jsonrpc":"2.0","id":`+id+`,"method":"eth_echo","params":`+params+`}`)
			want[params] = id
		}
		got := parseBatch(t, c.call("["+strings.Join(elems, ",")+"]"))
		if len(got) != len(ids) {
			t.Fatalf("batch of %d got %d answers", len(ids), len(got))
		}
		for _, r := range got {
			id, ok := want[r.echoParams()]
			if !ok {
				t.Fatalf("answer %s matches no request (or answers one twice)", r.Raw)
			}
			delete(want, r.echoParams())
			if string(r.ID) != id {
				t.Errorf("id = %s, want %s", r.ID, id)
			}
		}
	})
	seen := map[string]bool{}
	for _, r := range h.fake.Received() {
		if !upstreamIDPattern.Match(r.ID) || seen[string(r.ID)] {
			t.Errorf("upstream saw id %s: want a fresh decimal id per request", r.ID)
		}
		seen[string(r.ID)] = true
	}
}

// TestNotificationForwarded: a notification goes upstream as written and
// nothing ever comes back for it; no pending entry is made.
func TestNotificationForwarded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.dial(t)
	note := `{"jsonrpc":"2.0","method":"eth_note","params":["n1"]}`
	c.send(note)
	r := parseResp(t, c.call(`{"jsonrpc":"2.0","id":1,"method":"eth_after","params":["r1"]}`))
	wantEcho(t, r, `1`, "eth_after", `["r1"]`)
	got := h.fake.Received()
	if len(got) != 2 || string(got[0].Raw) != note || !got[0].IsNotification() || got[1].Method != "eth_after" {
		t.Fatalf("upstream received %d messages, want the notification (as written) then the request", len(got))
	}
	if n := h.pendingLen(); n != 0 {
		t.Errorf("pending table holds %d entries after the answer, want 0", n)
	}
	c.barrier()
}

// TestBatches covers the batch rows of the correlation contract.
func TestBatches(t *testing.T) {
	t.Parallel()

	t.Run("mixed, answered in reverse", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		var mu sync.Mutex
		var held []fakeReq
		h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
			if r.IsNotification() || r.Method == "barrier" {
				fc.Answer(r)
				return
			}
			mu.Lock()
			held = append(held, r)
			all := len(held) == 3
			mu.Unlock()
			if all {
				for i := len(held) - 1; i >= 0; i-- {
					fc.Answer(held[i])
				}
			}
		})
		c := h.dial(t)
		got := parseBatch(t, c.call(fourElementBatch))
		if len(got) != 3 {
			t.Fatalf("got %d answers, want 3 (one per element with an id): %s", len(got), got[0].Raw)
		}
		wantFourElementEchoes(t, got)
		// The node got the batch as one array, in the client's order,
		// the notification in its place.
		reqs := h.fake.Received()
		if len(reqs) != 4 || h.fake.Counts().Batches != 1 {
			t.Errorf("upstream got %d messages (%d arrays), want the 4 elements in one array", len(reqs), h.fake.Counts().Batches)
		}
		for i, m := range []string{"eth_a", "eth_note", "eth_b", "eth_c"} {
			if i < len(reqs) && reqs[i].Method != m {
				t.Errorf("upstream element %d is %s, want %s", i, reqs[i].Method, m)
			}
		}
		c.barrier()
	})

	t.Run("notifications only", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		c := h.dial(t)
		c.send(`[{"jsonrpc":"2.0","method":"eth_n1","params":[1]},{"jsonrpc":"2.0","method":"eth_n2"}]`)
		c.barrier() // nothing (not even []) came first
		var notes int
		for _, r := range h.fake.Received() {
			if r.IsNotification() {
				notes++
			}
		}
		if notes != 2 {
			t.Errorf("upstream got %d notifications, want 2", notes)
		}
	})

	t.Run("bad batches", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.MaxBatch = 4 }})
		c := h.dial(t)

		// [] is one error object, not an array.
		r := parseResp(t, c.call(`[]`))
		wantError(t, r, `null`, -32600, "empty batch")
		r = parseResp(t, c.call(` [ ] `))
		wantError(t, r, `null`, -32600, "empty batch")

		// Non-objects get -32600 id:null each; the good element is served.
		got := parseBatch(t, c.call(`[1,"x",{"jsonrpc":"2.0","id":5,"method":"eth_good","params":["g"]}]`))
		if len(got) != 3 {
			t.Fatalf("got %d answers, want 3", len(got))
		}
		bad := 0
		for _, r := range got {
			if r.Error != nil {
				wantError(t, r, `null`, -32600, "invalid request")
				bad++
			} else {
				wantEcho(t, r, `5`, "eth_good", `["g"]`)
			}
		}
		if bad != 2 {
			t.Errorf("got %d -32600 entries, want 2", bad)
		}

		// Over MaxBatch: one -32005 object, nothing upstream.
		before := len(h.fake.Received())
		var elems []string
		for i := range 5 {
			elems = append(elems, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"eth_x"}`, i))
		}
		r = parseResp(t, c.call("["+strings.Join(elems, ",")+"]"))
		wantError(t, r, `null`, -32005, "limit exceeded")
		// Exactly MaxBatch is fine.
		got = parseBatch(t, c.call("["+strings.Join(elems[:4], ",")+"]"))
		if len(got) != 4 {
			t.Errorf("batch of MaxBatch got %d answers", len(got))
		}
		if n := len(h.fake.Received()) - before; n != 4 {
			t.Errorf("upstream got %d messages for the two batches, want 4 (the oversized one must not go)", n)
		}
	})

	t.Run("duplicate ids", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{fake: func(f *fakeUpstream) { f.Reorder() }})
		c := h.dial(t)
		got := parseBatch(t, c.call(`[
			{"jsonrpc":"2.0","id":7,"method":"eth_d","params":["a"]},
			{"jsonrpc":"2.0","id":7,"method":"eth_d","params":["b"]},
			{"jsonrpc":"2.0","id":7,"method":"eth_d","params":["c"]},
			{"jsonrpc":"2.0","method":"eth_d","params":["note"]}
		]`))
		want := map[string]bool{`["a"]`: true, `["b"]`: true, `["c"]`: true}
		if len(got) != 3 {
			t.Fatalf("got %d answers, want 3", len(got))
		}
		for _, r := range got {
			if string(r.ID) != `7` || !want[r.echoParams()] {
				t.Fatalf("unexpected or repeated answer %s", r.Raw)
			}
			delete(want, r.echoParams())
		}
		// The same holds for duplicate singles in flight together.
		c.send(`{"jsonrpc":"2.0","id":8,"method":"eth_d","params":["x"]}`)
		c.send(`{"jsonrpc":"2.0","id":8,"method":"eth_d","params":["y"]}`)
		a, b := parseResp(t, c.recv()), parseResp(t, c.recv())
		if string(a.ID) != `8` || string(b.ID) != `8` || a.echoParams() == b.echoParams() {
			t.Errorf("duplicate singles: got %s and %s", a.Raw, b.Raw)
		}
	})
}

// TestInvalidInput: muxd answers garbage itself and never lets it reach
// the shared socket (the fake, like geth, would close it).
func TestInvalidInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	c := h.dial(t)
	other := h.dial(t)
	cases := []struct {
		name, frame string
		id          string
		code        int
		msg         string
	}{
		{"truncated", `{"jsonrpc":"2.0","id":1,"method":"x"`, `null`, -32700, "parse error"},
		{"not json", `hello`, `null`, -32700, "parse error"},
		{"trailing garbage", `{"jsonrpc":"2.0","id":1,"method":"x"} x`, `null`, -32700, "parse error"},
		{"bad batch json", `[{"jsonrpc":"2.0","id":1,"method":"x"},]`, `null`, -32700, "parse error"},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"x"}`, `1`, -32600, "invalid request"},
		{"no jsonrpc", `{"id":"s","method":"x"}`, `"s"`, -32600, "invalid request"},
		{"method number", `{"jsonrpc":"2.0","id":"a","method":5}`, `"a"`, -32600, "invalid request"},
		{"no method", `{"jsonrpc":"2.0","id":2}`, `2`, -32600, "invalid request"},
		{"id object", `{"jsonrpc":"2.0","id":{"a":1},"method":"x"}`, `null`, -32600, "invalid request"},
		{"id array", `{"jsonrpc":"2.0","id":[1],"method":"x"}`, `null`, -32600, "invalid request"},
		{"id bool", `{"jsonrpc":"2.0","id":true,"method":"x"}`, `null`, -32600, "invalid request"},
		{"params number", `{"jsonrpc":"2.0","id":3,"method":"x","params":1}`, `3`, -32600, "invalid request"},
		{"id lookalike", `{"jsonrpc":"2.0","ID":4,"method":"x"}`, `null`, -32600, "invalid request"},
		{"not an object", `"just a string"`, `null`, -32600, "invalid request"},
		{"invalid notification", `{"jsonrpc":"1.0","method":"x"}`, `null`, -32600, "invalid request"},
		{"denied method", `{"jsonrpc":"2.0","id":9,"method":"admin_peers"}`, `9`, -32601, "the method admin_peers does not exist/is not available"},
		{"denied method, other case", `{"jsonrpc":"2.0","id":10,"method":"ADMIN_peers"}`, `10`, -32601, "the method ADMIN_peers does not exist/is not available"},
		{"denied method, slash", `{"jsonrpc":"2.0","id":11,"method":"admin_/peers"}`, `11`, -32601, "the method admin_/peers does not exist/is not available"},
		{"denied method, escaped", `{"jsonrpc":"2.0","id":12,"method":"admin\u005fpeers"}`, `12`, -32601, "the method admin_peers does not exist/is not available"},
		{"denied debug_setHead", `{"jsonrpc":"2.0","id":13,"method":"debug_setHead","params":["0x1"]}`, `13`, -32601, "the method debug_setHead does not exist/is not available"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := parseResp(t, c.call(tc.frame))
			wantError(t, r, tc.id, tc.code, tc.msg)
		})
	}
	if n := len(h.fake.Received()); n != 0 {
		t.Errorf("upstream received %d messages, want none", n)
	}
	// Both clients keep working on the one upstream connection.
	wantEcho(t, parseResp(t, other.call(`{"jsonrpc":"2.0","id":1,"method":"eth_ok","params":["o"]}`)), `1`, "eth_ok", `["o"]`)
	wantEcho(t, parseResp(t, c.call(`{"jsonrpc":"2.0","id":1,"method":"eth_ok","params":["c"]}`)), `1`, "eth_ok", `["c"]`)
	if n := h.fake.NumConns(); n != 1 {
		t.Errorf("upstream connections = %d, want 1", n)
	}
	if h.fake.Counts().Malformed != 0 {
		t.Errorf("upstream received %d malformed frames", h.fake.Counts().Malformed)
	}
}

// TestUpstreamGarbage: responses that match nothing (unknown ids, repeats,
// id:null) are counted and dropped, never delivered; the real answer is.
func TestUpstreamGarbage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
		switch r.Method {
		case "eth_dirty":
			fc.Send([]byte(`{"jsonrpc":"2.0","id":999999,"result":"unknown"}`))
			fc.Send([]byte(`{"jsonrpc":"2.0","id":"abc","result":"string id"}`))
			fc.Send([]byte(`{"jsonrpc":"2.0","id":-1,"result":"negative"}`))
			fc.Send([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"null"}}`))
			fc.Send([]byte(`not json at all`))
			fc.Send([]byte(`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xdead","result":1}}`))
			fc.Send([]byte(`{"jsonrpc":"2.0","method":"something_else"}`))
			fc.Answer(r)
			fc.Answer(r) // a duplicate
		case "eth_spaced":
			// Legal JSON the scanner must take in its stride: white
			// space around the object, error member last.
			fc.Send([]byte(" \n" + string(errorFrame(r.ID, 3, "execution reverted")) + " "))
		case "eth_twice":
			// A node answering with an array (muxd never sends one).
			fc.Send([]byte(`[` + string(errorFrame([]byte(`999998`), 1, "not ours")) + `,` + string(errorFrame(r.ID, 4, "second")) + `]`))
		default:
			fc.Answer(r)
		}
	})
	m := h.srv.Metrics()
	c := h.dial(t)
	wantEcho(t, parseResp(t, c.call(`{"jsonrpc":"2.0","id":"d","method":"eth_dirty","params":["p"]}`)), `"d"`, "eth_dirty", `["p"]`)
	c.barrier() // the duplicate came before the barrier's answer, and was not delivered
	for _, x := range []struct {
		r    DropReason
		want float64
	}{
		{DropUnknownID, 4}, // 999999, "abc", -1, the duplicate
		{DropNullID, 1},
		{DropMalformed, 1},
		{DropUnknownSubscription, 1},
		{DropUnexpected, 1},
	} {
		if got := m.DroppedCount(x.r); got != x.want {
			t.Errorf("dropped %s = %v, want %v", x.r, got, x.want)
		}
	}

	t.Run("whitespace around a response", func(t *testing.T) {
		r := parseResp(t, c.call(`{"jsonrpc":"2.0","id":10,"method":"eth_spaced"}`))
		wantError(t, r, `10`, 3, "execution reverted")
		if n := counterValue(m.Responses.WithLabelValues("3")); n != 1 {
			t.Errorf("responses counted under code 3: %v, want 1", n)
		}
	})
	t.Run("response array", func(t *testing.T) {
		r := parseResp(t, c.call(`{"jsonrpc":"2.0","id":11,"method":"eth_twice"}`))
		wantError(t, r, `11`, 4, "second")
		// 4 is outside JSON-RPC's reserved range: the node picks such
		// codes, so they share one series.
		if n := counterValue(m.Responses.WithLabelValues("other")); n != 1 {
			t.Errorf("responses counted under code \"other\": %v, want 1", n)
		}
	})
	c.barrier()
	if n := h.fake.NumConns(); n != 1 {
		t.Errorf("upstream connections = %d, want 1", n)
	}
}
