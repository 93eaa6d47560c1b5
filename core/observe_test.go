package core

import (
	"strings"
	"testing"
)

// TestOutcomes: every answer is counted with its request's method and how
// it was answered (Observer.Answered), and the node's answers to single
// requests with the time the connection took (Observer.RoundTrip): from
// the request's arrival, or from the connection's start for one that
// waited for it.
func TestOutcomes(t *testing.T) {
	cache := func(c *Config) { c.CacheBytes = 1 << 20 }
	runScripts(t, []scriptRow{
		{name: "result_and_error_from_the_node_with_round_trips", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`,
				want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`}},
			{do: "up", at: 30 * msec, in: `{"jsonrpc":"2.0","id":1,"result":"0x1"}`,
				want:   []string{`c1< {"jsonrpc":"2.0","id":1,"result":"0x1"}`},
				counts: map[string]int{"outcome eth_chainId result": 1, "round trip 1": 1, "round trip ms": 30}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":2,"method":"eth_call","params":[]}`,
				want: []string{`up> {"jsonrpc":"2.0","id":2,"method":"eth_call","params":[]}`}},
			{do: "up", at: 50 * msec, in: `{"jsonrpc":"2.0","id":2,"error":{"code":3,"message":"reverted"}}`,
				want:   []string{`c1< {"jsonrpc":"2.0","id":2,"error":{"code":3,"message":"reverted"}}`},
				counts: map[string]int{"outcome eth_call error": 1, "round trip 1": 2, "round trip ms": 50}},
		}},
		{name: "refused_by_muxd", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"admin_peers"}`,
				want:   []string{`c1< {"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"the method admin_peers does not exist/is not available","data":{"reason":"denied"}}}`},
				counts: map[string]int{"outcome admin_peers refused": 1}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,`,
				want:   []string{`c1< {"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`},
				counts: map[string]int{"outcome  refused": 1, "round trip ms": 0}},
		}},
		{name: "timeout_and_connection_lost", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}`,
				want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}`}},
			{do: "tick", at: 10 * sec, want: []string{"c1< " + timedOut("1")},
				counts: map[string]int{"outcome eth_blockNumber timeout": 1}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":2,"method":"eth_sendRawTransaction","params":["0x00"]}`,
				want: []string{`up> {"jsonrpc":"2.0","id":2,"method":"eth_sendRawTransaction","params":["0x00"]}`}},
			{do: "lost", want: []string{`c1< {"jsonrpc":"2.0","id":2,"error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"connection lost"}}}`},
				counts: map[string]int{"outcome eth_sendRawTransaction unavailable": 1, "round trip 1": 0}},
		}},
		{name: "a_request_that_waited_counts_its_round_trip_from_the_connection", steps: []step{
			{do: "join"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`},
			{do: "connect", at: 2 * sec, want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`}},
			{do: "up", at: 2*sec + 20*msec, in: `{"jsonrpc":"2.0","id":1,"result":"0x1"}`,
				want:   []string{`c1< {"jsonrpc":"2.0","id":1,"result":"0x1"}`},
				counts: map[string]int{"outcome eth_chainId result": 1, "round trip 1": 1, "round trip ms": 20}},
		}},
		{name: "cache", cfg: cache, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`,
				want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`}},
			{do: "up", in: `{"jsonrpc":"2.0","id":1,"result":"0x1"}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":1,"result":"0x1"}`}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}`,
				want:   []string{`c1< {"jsonrpc":"2.0","id":2,"result":"0x1"}`},
				counts: map[string]int{"outcome eth_chainId result": 1, "outcome eth_chainId cache": 1, "round trip 1": 1}},
		}},
	})
}

// TestSubscriptionsSnapshot: Subscriptions lists the keys in order with
// their state and members, a long key cut to KeyStatusMax bytes, and at
// most limit of them.
func TestSubscriptionsSnapshot(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxHeldBytes = 1 << 20 })
	c1 := h.join(false)
	c2 := h.join(false)
	h.connect()
	long := `["logs",{"address":"0x` + strings.Repeat("ab", 100) + `"}]`
	h.clientFrame(c1, `{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`)
	h.clientFrame(c2, `{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`)
	h.clientFrame(c1, `{"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":`+long+`}`)
	h.upstreamFrame(h.gen, `{"jsonrpc":"2.0","id":1,"result":"0xu1"}`, false)

	keys, n := h.c.Subscriptions(0)
	if n != 2 || len(keys) != 2 {
		t.Fatalf("%d keys listed of %d, want 2 of 2: %+v", len(keys), n, keys)
	}
	// In key order: the logs key sorts first.
	tests := []struct {
		prefix    string
		state     string
		clients   int
		truncated bool
		shown     int
		keyBytes  int
	}{
		{`["logs",{"address":"0xabab`, "subscribing", 1, true, KeyStatusMax, len(long)},
		{`["newHeads"]`, "live", 2, false, len(`["newHeads"]`), len(`["newHeads"]`)},
	}
	for i, tt := range tests {
		k := keys[i]
		if !strings.HasPrefix(k.Key, tt.prefix) || k.State != tt.state || k.Clients != tt.clients || k.Truncated != tt.truncated || len(k.Key) != tt.shown || k.KeyBytes != tt.keyBytes {
			t.Errorf("key %d %+v, want %s…: state %s, %d clients, truncated %v, %d of %d bytes", i, k, tt.prefix, tt.state, tt.clients, tt.truncated, tt.shown, tt.keyBytes)
		}
	}
	if keys, n := h.c.Subscriptions(1); len(keys) != 1 || n != 2 {
		t.Errorf("limit 1: %d keys listed of %d, want 1 of 2", len(keys), n)
	}
}
