package core

import "testing"

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
