package core

import (
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
