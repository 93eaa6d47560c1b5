package core

import (
	"fmt"
	"testing"
)

// histSub is a client's logs eth_subscribe from block from (range: the
// filter's members, raw JSON, after fromBlock).
func histSubFrame(id string, from int, more string) string {
	return sub(id, fmt.Sprintf(`["logs",{"fromBlock":"0x%x"%s}]`, from, more))
}

// ownCall is muxd's own request uid of method with params (raw JSON).
func ownCall(uid int, method, params string) string {
	return fmt.Sprintf(`up> {"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, uid, method, params)
}

func getLogsRange(uid, from, to int) string {
	return ownCall(uid, "eth_getLogs", fmt.Sprintf(`[{"fromBlock":"0x%x","toBlock":"0x%x"}]`, from, to))
}

// TestHistoryGlue covers the core's part of history subscriptions
// (history.go): the checks before the answer and their refusals, the
// history once the key is live, its seam with the live pushes, toBlock,
// and sharing the key with plain subscriptions.
func TestHistoryGlue(t *testing.T) {
	cfg := func(c *Config) { c.BackfillBlocks = 8; c.HistoryBlocks = 100 }
	runScripts(t, []scriptRow{
		{name: "history_then_live", cfg: cfg, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: histSubFrame("1", 5, ""), want: []string{ownCall(1, "eth_blockNumber", "[]")}},
			{do: "up", in: res("1", `"0x10"`), want: []string{getLogsRange(2, 5, 5)}},
			// The key is new: where it starts, and its subscription.
			{do: "up", in: res("2", `[]`), want: []string{ownCall(3, "eth_blockNumber", "[]"), "up> " + upSub("4", `["logs",{}]`)}},
			// Live: the client's answer first, then the history's head.
			{do: "up", in: res("4", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`),
				ownCall(5, "eth_getBlockByNumber", `["latest",false]`)}},
			{do: "up", in: res("3", `"0x10"`)},
			{do: "up", in: res("5", hdr(16, "a", "9")), want: []string{getLogsRange(6, 5, 16)}},
			// Mined while the history is fetched: block 16's log (also
			// in the history) and block 17's, held.
			{do: "up", in: push(`"0xaa"`, mined(16, 0, "a"))},
			{do: "up", in: push(`"0xaa"`, mined(17, 0, "b"))},
			{do: "up", in: res("6", "["+mined(6, 0, "6")+","+mined(16, 0, "a")+"]"), want: []string{
				"c1< " + push(`"0xs1"`, mined(6, 0, "6")),
				"c1< " + push(`"0xs1"`, mined(16, 0, "a")),
				"c1< " + push(`"0xs1"`, mined(17, 0, "b")),
			}, counts: map[string]int{"history logs": 2, "history requests": 4}},
			{do: "up", in: push(`"0xaa"`, mined(18, 0, "c")), want: []string{"c1< " + push(`"0xs1"`, mined(18, 0, "c"))}},
		}},
		{name: "shares_the_upstream_subscription_of_its_filter", cfg: cfg, steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", `["logs",{}]`), want: []string{ownCall(1, "eth_blockNumber", "[]"), "up> " + upSub("2", `["logs",{}]`)}},
			{do: "up", in: res("2", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`)}},
			{do: "up", in: res("1", `"0x10"`)},
			{do: "c2", in: histSubFrame("1", 12, ""), want: []string{ownCall(3, "eth_blockNumber", "[]")}},
			{do: "up", in: res("3", `"0x10"`), want: []string{getLogsRange(4, 12, 12)}},
			{do: "up", in: res("4", `[]`), want: []string{"c2< " + res("1", `"0xs2"`), ownCall(5, "eth_getBlockByNumber", `["latest",false]`)},
				keys: []string{`["logs",{}] live 2`}},
			// The plain subscription gets the live push; the history one
			// holds it behind its history.
			{do: "up", in: push(`"0xaa"`, mined(17, 0, "b")), want: []string{"c1< " + push(`"0xs1"`, mined(17, 0, "b"))}},
			{do: "up", in: res("5", hdr(16, "a", "9")), want: []string{getLogsRange(6, 12, 16)}},
			{do: "up", in: res("6", "["+mined(14, 0, "e")+","+mined(16, 0, "a")+"]"), want: []string{
				"c2< " + push(`"0xs2"`, mined(14, 0, "e")),
				"c2< " + push(`"0xs2"`, mined(16, 0, "a")),
				"c2< " + push(`"0xs2"`, mined(17, 0, "b")),
			}, counts: map[string]int{"history logs": 2}},
			{do: "up", in: push(`"0xaa"`, mined(18, 0, "c")), want: []string{"c1< " + push(`"0xs1"`, mined(18, 0, "c")), "c2< " + push(`"0xs2"`, mined(18, 0, "c"))}},
			{do: "c2", in: unsub("2", `"0xs2"`), want: []string{"c2< " + res("2", "true")}, keys: []string{`["logs",{}] live 1`}},
		}},
		{name: "toBlock_in_the_past:_that_range,_then_silence", cfg: cfg, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: histSubFrame("1", 5, `,"toBlock":"0xc"`), want: []string{ownCall(1, "eth_blockNumber", "[]")}},
			{do: "up", in: res("1", `"0x10"`), want: []string{getLogsRange(2, 5, 5)}},
			{do: "up", in: res("2", `[]`), want: []string{ownCall(3, "eth_blockNumber", "[]"), "up> " + upSub("4", `["logs",{}]`)}},
			// Only [5, 12] is asked for: no head.
			{do: "up", in: res("4", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`), getLogsRange(5, 5, 12)}},
			{do: "up", in: res("3", `"0x10"`)},
			{do: "up", in: push(`"0xaa"`, mined(17, 0, "b"))},
			{do: "up", in: res("5", "["+mined(6, 0, "6")+","+mined(12, 0, "c")+"]"), want: []string{
				"c1< " + push(`"0xs1"`, mined(6, 0, "6")),
				"c1< " + push(`"0xs1"`, mined(12, 0, "c")),
			}, counts: map[string]int{"history logs": 2}},
			// Past toBlock: nothing, ever.
			{do: "up", in: push(`"0xaa"`, mined(18, 0, "d"))},
		}},
		{name: "range_past_history_blocks_refused", cfg: cfg, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: histSubFrame("1", 5, ""), want: []string{ownCall(1, "eth_blockNumber", "[]")}},
			{do: "up", in: res("1", `"0x100"`), want: []string{"c1< " + `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params","data":{"reason":"the history asked for is 252 blocks, more than history_blocks (100)"}}}`}, counts: map[string]int{"history refused too_long": 1}},
		}},
		{name: "toBlock_past_history_blocks_refused", cfg: cfg, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: histSubFrame("1", 5, `,"toBlock":"0x100"`), want: []string{ownCall(1, "eth_blockNumber", "[]")}},
			{do: "up", in: res("1", `"0x200"`), want: []string{"c1< " + `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params","data":{"reason":"the history asked for is 252 blocks, more than history_blocks (100)"}}}`}, counts: map[string]int{"history refused too_long": 1}},
		}},
		{name: "fromBlock_above_the_head_refused", cfg: cfg, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: histSubFrame("1", 0x20, ""), want: []string{ownCall(1, "eth_blockNumber", "[]")}},
			{do: "up", in: res("1", `"0x1f"`), want: []string{"c1< " + `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params","data":{"reason":"fromBlock 0x20 is above the node's head 0x1f"}}}`}, counts: map[string]int{"history refused above_head": 1}},
		}},
		{name: "malformed_range_refused_at_once", cfg: cfg, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: histSubFrame("1", 5, `,"toBlock":"0x4"`), want: []string{"c1< " + `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params","data":{"reason":"invalid subscription range: toBlock is below fromBlock"}}}`}, counts: map[string]int{"history refused malformed": 1}},
			{do: "c1", in: sub("2", `["logs",{"fromBlock":"five"}]`), want: []string{"c1< " + `{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"invalid params","data":{"reason":"invalid subscription range: fromBlock must be a block number (0x-hex quantity) or a tag"}}}`}, counts: map[string]int{"history refused malformed": 2}},
		}},
		{name: "the_node's_error_for_the_range_passed_on", cfg: cfg, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: histSubFrame("1", 5, ""), want: []string{ownCall(1, "eth_blockNumber", "[]")}},
			{do: "up", in: res("1", `"0x10"`), want: []string{getLogsRange(2, 5, 5)}},
			{do: "up", in: `{"jsonrpc":"2.0","id":2,"error":{"code":4444,"message":"pruned history unavailable"}}`,
				want:   []string{`c1< {"jsonrpc":"2.0","id":1,"error":{"code":4444,"message":"pruned history unavailable"}}`},
				counts: map[string]int{"history refused node_error": 1}, keys: []string{}},
		}},
		{name: "off_when_history_blocks_is_0", cfg: func(c *Config) { c.BackfillBlocks = 8 }, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: histSubFrame("1", 5, ""), want: []string{"c1< " + `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params","data":{"reason":"fromBlock history is off on this muxd (history_blocks or backfill_blocks is 0)"}}}`}},
			// A tag is today's subscription, as the node reads it.
			{do: "c1", in: sub("2", `["logs",{"fromBlock":"latest"}]`), want: []string{ownCall(1, "eth_blockNumber", "[]"), "up> " + upSub("2", `["logs",{"fromBlock":"latest"}]`)}},
		}},
	})
}
