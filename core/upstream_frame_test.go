package core

import (
	"strings"
	"testing"
)

// req is a request of client id (raw JSON) for method, with no params.
func req(id, method string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `"}`
}

// res is an answer with id (raw JSON) and result (raw JSON).
func res(id, result string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"result":` + result + `}`
}

// TestResponsesAndBatches covers DESIGN §1's batch rows and §2's layer 1:
// a client batch goes upstream as one array (or consecutive arrays of at
// most UpstreamMaxBatch), its answers are re-assembled into one array,
// and what the node answers that no request asked for is dropped.
func TestResponsesAndBatches(t *testing.T) {
	a, b, c, d := req(`"a"`, "eth_chainId"), req(`"b"`, "eth_blockNumber"), req(`"c"`, "eth_gasPrice"), req(`"d"`, "net_version")
	runScripts(t, []scriptRow{
		{name: "batch_one_array_answered_whole", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			// The node answers in its own order; the client gets request order.
			{do: "up", in: "[" + res("2", `"0x10"`) + "," + res("1", `"0x1"`) + "]",
				want:   []string{`c1< [` + res(`"a"`, `"0x1"`) + `,` + res(`"b"`, `"0x10"`) + `]`},
				counts: map[string]int{"answered 0 upstream": 2}},
		}},
		{name: "batch_answered_element_by_element", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "up", in: res("2", `"0x10"`)},
			{do: "up", in: "[" + res("1", `"0x1"`) + "]",
				want: []string{`c1< [` + res(`"a"`, `"0x1"`) + `,` + res(`"b"`, `"0x10"`) + `]`}},
		}},
		{name: "batch_with_own_answers_and_a_notification", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + `,{"jsonrpc":"2.0","method":"eth_foo"},` + req("2", "admin_peers") + `,1]`,
				want: []string{`up> [` + req("1", "eth_chainId") + `,{"jsonrpc":"2.0","method":"eth_foo"}]`}},
			{do: "up", in: "[" + res("1", `"0x1"`) + "]",
				want: []string{`c1< [` + res(`"a"`, `"0x1"`) + `,` +
					`{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"the method admin_peers does not exist/is not available","data":{"reason":"denied"}}},` +
					`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request","data":{"reason":"batch element is not an object"}}}]`}},
		}},
		{name: "batch_answers_in_request_order_whoever_answers", cfg: func(c *Config) { c.CacheBytes = 1 << 20; c.MaxBatch = 8 }, steps: []step{
			// ethers 5 and web3.js 4 pair a batch's answers by position:
			// the array follows the request's elements whoever answered
			// each (the node in its own order, the cache, muxd's refusals).
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req(`"x"`, "eth_chainId"), want: []string{`up> ` + req("1", "eth_chainId")}},
			{do: "up", in: res("1", `"0x539"`), want: []string{`c1< ` + res(`"x"`, `"0x539"`)}},
			{do: "c1", in: "[" + req("1", "eth_blockNumber") + "," + req("2", "eth_chainId") + "]",
				want: []string{`up> ` + req("2", "eth_blockNumber")}},
			{do: "up", in: res("2", `"0x10"`),
				want: []string{`c1< [` + res("1", `"0x10"`) + `,` + res("2", `"0x539"`) + `]`}},
			{do: "c1", in: "[" + req("1", "eth_blockNumber") + "," + req("2", "eth_chainId") + "," + req("3", "admin_peers") + "," +
				`{"jsonrpc":"2.0","id":4},{"jsonrpc":"2.0","method":"eth_foo"},` + req("5", "eth_gasPrice") + `,7,` + req(`"z"`, "net_version") + "]",
				want: []string{`up> [` + req("3", "eth_blockNumber") + `,{"jsonrpc":"2.0","method":"eth_foo"},` + req("4", "eth_gasPrice") + `]`}},
			{do: "up", in: "[" + res("4", `"0x2"`) + "," + res("3", `"0x11"`) + "]",
				want: []string{`up> ` + req("5", "net_version")}},
			{do: "up", in: res("5", `"1"`),
				want: []string{`c1< [` + res("1", `"0x11"`) + `,` + res("2", `"0x539"`) + `,` +
					`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"the method admin_peers does not exist/is not available","data":{"reason":"denied"}}},` +
					`{"jsonrpc":"2.0","id":4,"error":{"code":-32600,"message":"invalid request","data":{"reason":"method must be a string"}}},` +
					res("5", `"0x2"`) + `,` +
					`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request","data":{"reason":"batch element is not an object"}}},` +
					res(`"z"`, `"1"`) + `]`}},
		}},
		{name: "batch_answered_by_muxd_alone", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + req("1", "admin_peers") + `,{"jsonrpc":"2.0","method":"eth_foo"}]`,
				want: []string{
					`c1< [{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"the method admin_peers does not exist/is not available","data":{"reason":"denied"}}}]`,
					`up> {"jsonrpc":"2.0","method":"eth_foo"}`,
				}},
		}},
		{name: "batch_of_notifications_only", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]`,
				want: []string{`up> [{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]`, "no answer"}},
		}},
		{name: "batch_with_one_forwarded_element_goes_alone", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + req("2", "admin_peers") + "]",
				want: []string{`up> ` + req("1", "eth_chainId")}},
			{do: "up", in: res("1", `"0x1"`),
				want: []string{`c1< [` + res(`"a"`, `"0x1"`) + `,{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"the method admin_peers does not exist/is not available","data":{"reason":"denied"}}}]`}},
		}},
		{name: "long_batch_goes_as_consecutive_arrays", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "," + c + "," + d + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `,` + req("3", "eth_gasPrice") + `]`}},
			{do: "up", in: "[" + res("1", `"0x1"`) + "," + res("2", `"0x2"`) + "]"},
			{do: "up", in: res("3", `"0x3"`), want: []string{`up> ` + req("4", "net_version")}},
			{do: "up", in: "[" + res("4", `"1"`) + "]",
				want: []string{`c1< [` + res(`"a"`, `"0x1"`) + `,` + res(`"b"`, `"0x2"`) + `,` + res(`"c"`, `"0x3"`) + `,` + res(`"d"`, `"1"`) + `]`}},
		}},
		{name: "batch_goes_as_arrays_within_the_nodes_message_limit", cfg: func(c *Config) { c.MaxUpstreamMessage = 101 }, steps: []step{
			// [req 1, req 2] is 101 bytes: a third would make the node
			// close the shared connection.
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "," + c + "," + d + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "up", in: "[" + res("1", `"0x1"`) + "," + res("2", `"0x2"`) + "]",
				want: []string{`up> [` + req("3", "eth_gasPrice") + `,` + req("4", "net_version") + `]`}},
			{do: "up", in: "[" + res("3", `"0x3"`) + "," + res("4", `"1"`) + "]",
				want: []string{`c1< [` + res(`"a"`, `"0x1"`) + `,` + res(`"b"`, `"0x2"`) + `,` + res(`"c"`, `"0x3"`) + `,` + res(`"d"`, `"1"`) + `]`}},
		}},
		{name: "request_too_large_for_the_node_once_rewritten", cfg: func(c *Config) { c.MaxUpstreamMessage = 65 }, steps: []step{
			// 49 bytes under id "a": under an upstream id of up to 20
			// digits, 66, past the node's limit. Never sent.
			{do: "join"}, {do: "connect"},
			{do: "c1", in: a,
				want:   []string{`c1< {"jsonrpc":"2.0","id":"a","error":{"code":-32005,"message":"limit exceeded","data":{"reason":"message too large"}}}`},
				counts: map[string]int{"limit message_size": 1}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":"x","method":"m"}`,
				want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"m"}`}},
			{do: "c1", in: "[" + a + `,{"jsonrpc":"2.0","id":"y","method":"m"}]`,
				want: []string{`up> {"jsonrpc":"2.0","id":2,"method":"m"}`}},
			{do: "up", in: res("2", "true"),
				want: []string{`c1< [{"jsonrpc":"2.0","id":"a","error":{"code":-32005,"message":"limit exceeded","data":{"reason":"message too large"}}},` + res(`"y"`, "true") + `]`}},
		}},
		{name: "geth_batch_too_large_refuses_the_whole_array", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "," + c + "," + d + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `,` + req("3", "eth_gasPrice") + `]`}},
			{do: "up", in: `[{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"batch too large"}}]`,
				want:   []string{`up> ` + req("4", "net_version")},
				counts: map[string]int{"answered -32600 upstream": 3}},
			{do: "up", in: res("4", `"1"`),
				want: []string{`c1< [` +
					`{"jsonrpc":"2.0","id":"a","error":{"code":-32600,"message":"batch too large"}},` +
					`{"jsonrpc":"2.0","id":"b","error":{"code":-32600,"message":"batch too large"}},` +
					`{"jsonrpc":"2.0","id":"c","error":{"code":-32600,"message":"batch too large"}},` +
					res(`"d"`, `"1"`) + `]`}},
		}},
		{name: "whole_answer_to_an_array_sends_the_notifications_after_it", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "," + c + `,{"jsonrpc":"2.0","method":"eth_foo"}]`,
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `,` + req("3", "eth_gasPrice") + `]`}},
			{do: "up", in: "[" + res("1", `"0x1"`) + "," + res("2", `"0x2"`) + "," + res("3", `"0x3"`) + "]",
				want: []string{
					`c1< [` + res(`"a"`, `"0x1"`) + `,` + res(`"b"`, `"0x2"`) + `,` + res(`"c"`, `"0x3"`) + `]`,
					`up> {"jsonrpc":"2.0","method":"eth_foo"}`,
				}},
		}},
		{name: "error_code_that_is_no_number_is_counted_as_minus_one", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: a, want: []string{`up> ` + req("1", "eth_chainId")}},
			{do: "up", in: `{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"odd"}}`,
				want:   []string{`c1< {"jsonrpc":"2.0","id":"a","error":{"code":"x","message":"odd"}}`},
				counts: map[string]int{"answered -1 upstream": 1}},
		}},
		{name: "first_call_error_alone_in_an_array_stays_its_own", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "up", in: `[{"jsonrpc":"2.0","id":1,"error":{"code":3,"message":"execution reverted"}}]`},
			{do: "up", in: `[` + res("2", `"0x2"`) + `]`,
				want: []string{`c1< [{"jsonrpc":"2.0","id":"a","error":{"code":3,"message":"execution reverted"}},` + res(`"b"`, `"0x2"`) + `]`}},
		}},
		{name: "lone_null_id_to_an_array_is_dropped_and_the_calls_time_out", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "up", in: `[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch too large"}}]`,
				want: []string{"drop null_id"}, counts: map[string]int{"dropped null_id": 1}},
			{do: "tick", at: 9999 * msec},
			{do: "tick", at: 10 * sec,
				want: []string{`c1< [{"jsonrpc":"2.0","id":"a","error":{"code":-32002,"message":"request timed out"}},{"jsonrpc":"2.0","id":"b","error":{"code":-32002,"message":"request timed out"}}]`}},
			{do: "up", in: "[" + res("1", `"0x1"`) + "," + res("2", `"0x2"`) + "]",
				want: []string{"drop unknown_id", "drop unknown_id"}},
		}},
		{name: "array_with_a_repeated_id_drops_the_repeat", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "up", in: "[" + res("1", `"0x1"`) + "," + res("1", `"0x9"`) + "]",
				want: []string{"drop unknown_id"}},
			{do: "up", in: res("2", `"0x2"`),
				want: []string{`c1< [` + res(`"a"`, `"0x1"`) + `,` + res(`"b"`, `"0x2"`) + `]`}},
		}},
		{name: "array_answer_with_a_push_inside_is_routed_element_by_element", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "up", in: "[" + res("1", `"0x1"`) + `,{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xdead","result":1}},` + res("2", `"0x2"`) + "]",
				want: []string{`c1< [` + res(`"a"`, `"0x1"`) + `,` + res(`"b"`, `"0x2"`) + `]`, "drop unknown_subscription"}},
		}},
		{name: "array_answer_with_a_foreign_id", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "up", in: "[" + res("1", `"0x1"`) + "," + res(`"x"`, `"0x2"`) + "]",
				want: []string{"drop unknown_id"}},
		}},
		{name: "array_answer_spanning_two_clients", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: a, want: []string{`up> ` + req("1", "eth_chainId")}},
			{do: "c2", in: b, want: []string{`up> ` + req("2", "eth_blockNumber")}},
			{do: "up", in: "[" + res("1", `"0x1"`) + "," + res("2", `"0x2"`) + "]",
				want: []string{`c1< ` + res(`"a"`, `"0x1"`), `c2< ` + res(`"b"`, `"0x2"`)}},
		}},
		{name: "array_answer_for_two_batches", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "c1", in: "[" + c + "," + d + "]",
				want: []string{`up> [` + req("3", "eth_gasPrice") + `,` + req("4", "net_version") + `]`}},
			{do: "up", in: "[" + res("1", `"0x1"`) + "," + res("3", `"0x3"`) + "]"},
			{do: "up", in: "[" + res("4", `"1"`) + "," + res("2", `"0x2"`) + "]",
				want: []string{
					`c1< [` + res(`"c"`, `"0x3"`) + `,` + res(`"d"`, `"1"`) + `]`,
					`c1< [` + res(`"a"`, `"0x1"`) + `,` + res(`"b"`, `"0x2"`) + `]`,
				}},
		}},
		{name: "large_array_answer_takes_the_element_path", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "up", in: "[" + res("1", `"`+strings.Repeat("f", 70<<10)+`"`) + "," + res("2", `"0x2"`) + "]",
				want: []string{`c1< [` + res(`"a"`, `"`+strings.Repeat("f", 70<<10)+`"`) + `,` + res(`"b"`, `"0x2"`) + `]`}},
		}},
		{name: "large_answer_routed_by_its_head", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req(`"big"`, "eth_getBlockByNumber"), want: []string{`up> ` + req("1", "eth_getBlockByNumber")}},
			{do: "uphead", in: `{"jsonrpc":"2.0","id":1,"result":{"number":"0x1","transactions":["` + strings.Repeat("ab", 100) + `"]}}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":"big","result":{"number":"0x1","transactions":["` + strings.Repeat("ab", 100) + `"]}}`}},
		}},
		{name: "what_the_node_answers_that_nobody_asked", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "up", in: `{"jsonrpc":"2.0","id":1,`, want: []string{"drop malformed"}},
			{do: "up", in: res("7", "1"), want: []string{"drop unknown_id"}},
			{do: "up", in: res(`"7"`, "1"), want: []string{"drop unknown_id"}},
			{do: "up", in: res("null", "1"), want: []string{"drop null_id"}},
			{do: "up", in: `{"jsonrpc":"2.0","method":"eth_foo"}`, want: []string{"drop unexpected"}},
			{do: "up", in: `{"jsonrpc":"2.0","method":"eth_subscription","params":{"result":1}}`, want: []string{"drop unexpected"}},
			{do: "up", in: `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":1}}`, want: []string{"drop unknown_subscription"}},
			// The empty array is valid JSON, but no answer to anything.
			{do: "up", in: `[]`, want: []string{"drop unexpected"}},
			{do: "up", in: ` [ ] `, want: []string{"drop unexpected"}},
		}},
		{name: "answer_on_a_connection_no_longer_current", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req(`"a"`, "eth_sendRawTransaction"), want: []string{`up> ` + req("1", "eth_sendRawTransaction")}},
			{do: "lost", want: []string{`c1< {"jsonrpc":"2.0","id":"a","error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"connection lost"}}}`}},
			{do: "connect"},
			{do: "up 1", in: res("1", `"0x1"`), want: []string{"drop unknown_id"}},
			{do: "up 1", in: `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":1}}`},
		}},
	})
}

// TestAmbiguousUpstreamMessages covers DESIGN §2: a message from the node
// that parsers may read more than one way (a JSON-RPC member twice, one
// named like it but for case or escapes, a push's subscription twice) is
// nobody's answer. It is dropped and counted malformed, never routed by
// whichever of its ids muxd would have read: neither client gets the
// other's result, and both get -32002 at their deadline, or the node's real
// answer when one comes. In an array only that element is dropped.
func TestAmbiguousUpstreamMessages(t *testing.T) {
	a, b := req(`"a"`, "eth_chainId"), req(`"b"`, "eth_blockNumber")
	twoInFlight := []step{
		{do: "join"}, {do: "join"}, {do: "connect"},
		{do: "c1", in: a, want: []string{`up> ` + req("1", "eth_chainId")}},
		{do: "c2", in: b, want: []string{`up> ` + req("2", "eth_blockNumber")}},
	}
	bothTimeOut := []step{
		{do: "tick", at: 9999 * msec},
		{do: "tick", at: 10 * sec, want: []string{`c1< ` + timedOut(`"a"`), `c2< ` + timedOut(`"b"`)}},
	}
	// dropped is the node's frame, the nth counted malformed.
	dropped := func(frame string, n int) step {
		return step{do: "up", in: frame, want: []string{"drop malformed"}, counts: map[string]int{"dropped malformed": n}}
	}
	big := `"` + strings.Repeat("f", 70<<10) + `"`
	var rows []scriptRow
	for _, tc := range []struct{ name, forA, forB string }{
		{"duplicate_id",
			`{"jsonrpc":"2.0","id":1,"id":2,"result":"0xA"}`,
			`{"jsonrpc":"2.0","id":2,"id":1,"result":"0xB"}`},
		{"duplicate_id_after_the_result",
			`{"jsonrpc":"2.0","id":2,"result":"0xA","id":1}`,
			`{"jsonrpc":"2.0","id":1,"result":"0xB","id":2}`},
		{"duplicate_id_large_answer",
			`{"jsonrpc":"2.0","id":1,"id":2,"result":` + big + `}`,
			`{"jsonrpc":"2.0","id":2,"id":1,"result":` + big + `}`},
		{"id_in_upper_case",
			`{"jsonrpc":"2.0","id":2,"ID":1,"result":"0xA"}`,
			`{"jsonrpc":"2.0","ID":2,"id":1,"result":"0xB"}`},
		{"id_escaped",
			`{"jsonrpc":"2.0","id":2,"\u0069d":1,"result":"0xA"}`,
			`{"jsonrpc":"2.0","i\u0064":2,"id":1,"result":"0xB"}`},
		{"duplicate_result",
			`{"jsonrpc":"2.0","id":1,"result":"0xA","result":"0xB"}`,
			`{"jsonrpc":"2.0","id":2,"result":"0xB","result":"0xA"}`},
		{"duplicate_error",
			`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"A"},"error":{"code":2,"message":"B"}}`,
			`{"jsonrpc":"2.0","id":2,"result":"0xB","error":{"code":2,"message":"B"},"error":null}`},
	} {
		steps := append(append([]step(nil), twoInFlight...), dropped(tc.forA, 1), dropped(tc.forB, 2))
		rows = append(rows, scriptRow{name: tc.name, steps: append(steps, bothTimeOut...)})
	}
	rows = append(rows,
		scriptRow{name: "the_nodes_real_answer_after_an_ambiguous_one", steps: append(append([]step(nil), twoInFlight...),
			dropped(`{"jsonrpc":"2.0","id":1,"id":2,"result":"0xA"}`, 1),
			step{do: "up", in: res("1", `"0xa"`), want: []string{`c1< ` + res(`"a"`, `"0xa"`)}},
			step{do: "tick", at: 10 * sec, want: []string{`c2< ` + timedOut(`"b"`)}},
		)},
		scriptRow{name: "one_element_of_an_array_answer", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "c2", in: req(`"c"`, "eth_gasPrice"), want: []string{`up> ` + req("3", "eth_gasPrice")}},
			{do: "up", in: "[" + res("1", `"0x1"`) + `,{"jsonrpc":"2.0","id":2,"id":3,"result":"0x2"}]`,
				want: []string{"drop malformed"}, counts: map[string]int{"dropped malformed": 1}},
			{do: "up", in: res("3", `"0x3"`), want: []string{`c2< ` + res(`"c"`, `"0x3"`)}},
			{do: "tick", at: 10 * sec,
				want: []string{`c1< [` + res(`"a"`, `"0x1"`) + `,` + timedOut(`"b"`) + `]`}},
		}},
		scriptRow{name: "a_push_with_its_subscription_twice", steps: liveHeads([]step{
			{do: "up", in: `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xbb","subscription":"0xaa","result":"0x12"}}`,
				want: []string{"drop malformed"}, counts: map[string]int{"dropped malformed": 1}},
			{do: "up", in: `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xaa","Subscription":"0xbb","result":"0x12"}}`,
				want: []string{"drop malformed"}, counts: map[string]int{"dropped malformed": 2}},
			{do: "up", in: push(`"0xaa"`, `"0x12"`), want: []string{`c1< ` + push(`"0xs1"`, `"0x12"`)}},
		})},
	)
	runScripts(t, rows)
}

// TestUpstreamTooLarge covers the event of an answer past the shell's read
// limit: each request it answers gets -32005 "response too large", routed
// as the node's answer would have been; an array element answers every
// call of its client batch's upstream array still in flight.
func TestUpstreamTooLarge(t *testing.T) {
	const tooLarge = `"error":{"code":-32005,"message":"limit exceeded","data":{"reason":"response too large"}}`
	a, b := req(`"a"`, "eth_chainId"), req(`"b"`, "eth_blockNumber")
	runScripts(t, []scriptRow{
		{name: "single_call", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req(`"x"`, "eth_getBlockByNumber"), want: []string{`up> ` + req("1", "eth_getBlockByNumber")}},
			{do: "toolarge 1", want: []string{`c1< {"jsonrpc":"2.0","id":"x",` + tooLarge + `}`}},
			// The node's late answer is nobody's now.
			{do: "up", in: res("1", `"0x1"`), want: []string{"drop unknown_id"}},
		}},
		{name: "array_answers_the_whole_batch", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "toolarge 2 array", want: []string{
				`c1< [{"jsonrpc":"2.0","id":"a",` + tooLarge + `},{"jsonrpc":"2.0","id":"b",` + tooLarge + `}]`}},
		}},
		{name: "lone_answer_of_a_batch_call_answers_only_it", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + a + "," + b + "]",
				want: []string{`up> [` + req("1", "eth_chainId") + `,` + req("2", "eth_blockNumber") + `]`}},
			{do: "toolarge 2"},
			{do: "up", in: res("1", `"0x1"`), want: []string{
				`c1< [{"jsonrpc":"2.0","id":"a","result":"0x1"},{"jsonrpc":"2.0","id":"b",` + tooLarge + `}]`}},
		}},
		{name: "unknown_id", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "toolarge 9 array", want: []string{"drop unknown_id"}},
		}},
	})
}
