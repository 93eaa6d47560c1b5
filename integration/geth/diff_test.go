package gethtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/rpc"
)

type call struct {
	method string
	args   []any
}

func (c call) String() string {
	b, _ := json.Marshal(c.args)
	return fmt.Sprintf("%s%s", c.method, b)
}

// batchOutcomes sends calls as one batch on c and returns each element's
// outcome.
func batchOutcomes(t *testing.T, c *rpc.Client, calls []call) []outcome {
	t.Helper()
	elems := make([]rpc.BatchElem, len(calls))
	results := make([]json.RawMessage, len(calls))
	for i, cl := range calls {
		elems[i] = rpc.BatchElem{Method: cl.method, Args: cl.args, Result: &results[i]}
	}
	if err := c.BatchCallContext(ctxT(t, 20*time.Second), elems); err != nil {
		t.Fatalf("BatchCallContext: %v", err)
	}
	out := make([]outcome, len(calls))
	for i, e := range elems {
		o, ok := outcomeOf(results[i], e.Error)
		if !ok {
			t.Fatalf("batch element %d (%s): transport error %v", i, calls[i], e.Error)
		}
		out[i] = o
	}
	return out
}

// callOutcome makes one call on c.
func callOutcome(t *testing.T, c *rpc.Client, cl call) outcome {
	t.Helper()
	var raw json.RawMessage
	err := c.CallContext(ctxT(t, 20*time.Second), &raw, cl.method, cl.args...)
	o, ok := outcomeOf(raw, err)
	if !ok {
		t.Fatalf("%s: transport error %v", cl, err)
	}
	return o
}

// TestBatchMatchesDirect sends one batch of mixed methods, including one
// geth does not know, through muxd and straight to geth, and compares every
// element's result or error.
func TestBatchMatchesDirect(t *testing.T) {
	h := newHarness(t, nil)
	direct := dial(t, h.node.WSURL)
	via := dial(t, h.WSURL)
	viaHTTP := dial(t, h.HTTPURL)
	dev := devAccount(t, direct)

	calls := []call{
		{"eth_chainId", nil},
		{"eth_getBlockByNumber", []any{"0x0", false}},
		{"net_version", nil},
		{"web3_clientVersion", nil},
		{"eth_getBalance", []any{dev, "0x0"}},
		{"eth_getCode", []any{dev, "0x0"}},
		{"nope_x", nil},
		{"eth_getBlockByNumber", []any{"0x0", true}},
		{"eth_chainId", nil},
	}
	want := batchOutcomes(t, direct, calls)
	if want[6].Code == 0 {
		t.Fatalf("geth answered nope_x without an error: %+v", want[6])
	}
	if want[0].Result != devChainID {
		t.Fatalf("direct eth_chainId = %v, want %s", want[0].Result, devChainID)
	}
	for name, c := range map[string]*rpc.Client{"ws": via, "http": viaHTTP} {
		got := batchOutcomes(t, c, calls)
		for i := range calls {
			if !sameOutcome(got[i], want[i]) {
				t.Errorf("%s element %d %s:\n via muxd %+v\n direct   %+v", name, i, calls[i], got[i], want[i])
			}
		}
	}
}

// TestReadCallsMatchDirect makes a set of read calls one by one through
// muxd (WebSocket and HTTP) and straight to geth and compares them.
func TestReadCallsMatchDirect(t *testing.T) {
	h := newHarness(t, nil)
	direct := dial(t, h.node.WSURL)
	via := dial(t, h.WSURL)
	viaHTTP := dial(t, h.HTTPURL)
	dev := devAccount(t, direct)
	waitBlock(t, direct, 1)

	empty := "0x00000000000000000000000000000000000000aa"
	calls := []call{
		{"eth_getBlockByNumber", []any{"0x0", false}},
		{"eth_getBlockByNumber", []any{"0x1", true}},
		{"eth_chainId", nil},
		{"eth_getBalance", []any{dev, "0x0"}},
		{"eth_call", []any{map[string]any{"to": empty, "data": "0x"}, "0x1"}},
		{"eth_call", []any{map[string]any{"from": dev, "to": empty, "data": "0x12345678"}, "0x1"}},
		{"eth_estimateGas", []any{map[string]any{"from": dev, "to": empty, "value": "0x1"}, "0x1"}},
		{"eth_getTransactionCount", []any{dev, "0x0"}},
		{"eth_getBlockByNumber", []any{"0xffffffff", false}}, // null result
		{"eth_getBalance", []any{"not-an-address", "0x0"}},   // invalid params
	}
	for _, cl := range calls {
		want := callOutcome(t, direct, cl)
		for name, c := range map[string]*rpc.Client{"ws": via, "http": viaHTTP} {
			got := callOutcome(t, c, cl)
			if !sameOutcome(got, want) {
				t.Errorf("%s %s:\n via muxd %+v\n direct   %+v", name, cl, got, want)
			}
		}
	}
	// Sanity: the simple transfer costs 21000 gas.
	if o := callOutcome(t, via, calls[6]); o.Result != "0x5208" {
		t.Errorf("eth_estimateGas transfer = %+v, want 0x5208", o)
	}
}

// TestRawHTTPBodiesMatchDirect posts bodies no JSON-RPC library sends to
// geth's HTTP endpoint and to muxd's, and compares what comes back: the
// status, and the body (empty on both, or the same error code and id on
// both).
func TestRawHTTPBodiesMatchDirect(t *testing.T) {
	h := newHarness(t, nil)
	bodies := []string{
		"",
		" \t\r\n ",
		"[]",
		"[1]",
		`{"jsonrpc":`,
		" x",
		`{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}`,
		` {"jsonrpc":"2.0","id":"a","method":"eth_chainId"} `,
		`{"jsonrpc":"2.0","method":"eth_chainId"}`,
	}
	for _, body := range bodies {
		want := postRaw(t, h.node.HTTPURL, body)
		got := postRaw(t, h.HTTPURL, body)
		if got != want {
			t.Errorf("body %q:\n via muxd %s\n direct   %s", body, got, want)
		}
	}
}

// postRaw posts body as application/json and sums up the answer: the
// status, and "empty" or the JSON-RPC id and error code (or result) of
// each message in it.
func postRaw(t *testing.T, url, body string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 20*time.Second), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %q: %v", body, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %q: read: %v", body, err)
	}
	sum := fmt.Sprintf("%d ", resp.StatusCode)
	if len(strings.TrimSpace(string(raw))) == 0 {
		return sum + "empty"
	}
	type msg struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	var msgs []msg
	if err := json.Unmarshal(raw, &msgs); err != nil {
		var one msg
		if err := json.Unmarshal(raw, &one); err != nil {
			return sum + "not JSON-RPC: " + string(raw)
		}
		msgs, sum = []msg{one}, sum+"object"
	} else {
		sum += "array"
	}
	for _, m := range msgs {
		if m.Error != nil {
			sum += fmt.Sprintf(" id=%s error=%d", m.ID, m.Error.Code)
		} else {
			sum += fmt.Sprintf(" id=%s result=%s", m.ID, m.Result)
		}
	}
	return sum
}
