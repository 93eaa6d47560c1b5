package gethtest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/internal/testnode"
)

// TestPipelinedLargeAnswersMatchDirect: a client that pipelines large
// calls and reads their answers only once the node has sent them all, far
// more than a client's outbound queue bound (32 MiB), gets from muxd what
// it gets from geth directly: every answer, byte for byte, and no cut.
// The calls are eth_calls of a contract given by state override that
// returns as many zero bytes as asked: 48 answers of 2 MiB of hex.
func TestPipelinedLargeAnswersMatchDirect(t *testing.T) {
	const (
		calls = 48
		size  = 1 << 20 // bytes returned; 2 MiB of hex in the answer
	)
	h := newHarness(t, nil)
	m := h.srv.Metrics()
	// PUSH1 0 CALLDATALOAD PUSH1 0 RETURN: return calldata[0:32] zero bytes.
	const contract, code = "0x00000000000000000000000000000000000b1065", "0x600035600" + "0f3"
	requests := make([][]byte, calls)
	for i := range requests {
		requests[i] = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"eth_call","params":[{"to":"%s","data":"0x%064x"},"latest",{"%s":{"code":"%s"}}]}`,
			i+1, contract, size, contract, code)
	}
	// pipeline sends every request on a fresh connection to url, waits for
	// ready, then reads the answers.
	pipeline := func(url string, ready func() bool) [][]byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			t.Fatalf("dial %s: %v", url, err)
		}
		defer c.CloseNow()
		c.SetReadLimit(64 << 20)
		for _, r := range requests {
			if err := c.Write(ctx, websocket.MessageText, r); err != nil {
				t.Fatalf("write: %v", err)
			}
		}
		if ready != nil {
			testnode.Poll(t, "every answer to be queued", ready)
		}
		answers := make([][]byte, 0, calls)
		for range calls {
			_, b, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("%s: answer %d: %v", url, len(answers)+1, err)
			}
			answers = append(answers, b)
		}
		return answers
	}
	direct := pipeline(h.node.WSURL, nil)
	// Through muxd the client reads nothing until every answer has come
	// from geth and is queued for it: about 96 MiB.
	answered := m.Responses.WithLabelValues("ok")
	through := pipeline(h.WSURL, func() bool { return counterValue(t, answered) == calls })
	// geth answers concurrent calls in the order they finish.
	byID := func(answers [][]byte) map[string][]byte {
		m := map[string][]byte{}
		for _, a := range answers {
			var env struct{ ID json.RawMessage }
			if err := json.Unmarshal(a, &env); err != nil {
				t.Fatalf("answer %.80q...: %v", a, err)
			}
			m[string(env.ID)] = a
		}
		return m
	}
	want, got := byID(direct), byID(through)
	if len(want) != calls {
		t.Fatalf("%d distinct ids directly, want %d", len(want), calls)
	}
	for id, w := range want {
		if g := got[id]; string(g) != string(w) {
			t.Fatalf("id %s: %d bytes through muxd (%.80q...), %d directly (%.80q...)", id, len(g), g, len(w), w)
		}
	}
	if len(direct[0]) < 2*size {
		t.Fatalf("answers of %d bytes, want over %d", len(direct[0]), 2*size)
	}
	if v := counterValue(t, m.SlowConsumers); v != 0 {
		t.Errorf("slow consumers = %v, want 0", v)
	}
}
