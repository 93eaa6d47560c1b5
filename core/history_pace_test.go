package core

import (
	"testing"
)

// TestHistoryPace covers histpace.go: history subscriptions' requests are
// bulk traffic. They take slots under max_upstream_in_flight, go only
// when no client call is queued for one, at most historyInFlight at a
// time (the harness checks that bound after every step of every script),
// keep the history exact, and are never sent for a subscriber that left.
func TestHistoryPace(t *testing.T) {
	cfg := func(n int) func(*Config) {
		return func(c *Config) { c.BackfillBlocks = 8; c.HistoryBlocks = 10000; c.MaxUpstreamInFlight = n }
	}
	// start subscribes c1 from block 1 with the node at block 5000 (five
	// ranges of HistoryChunk blocks), up to the history's head request
	// (uid 5), at the node.
	start := []step{
		{do: "join"}, {do: "join"}, {do: "connect"},
		{do: "c1", in: histSubFrame("1", 1, ""), want: []string{ownCall(1, "eth_blockNumber", "[]")}},
		{do: "up", in: res("1", `"0x1388"`), want: []string{getLogsRange(2, 1, 1)}},
		{do: "up", in: res("2", `[]`), want: []string{ownCall(3, "eth_blockNumber", "[]"), "up> " + upSub("4", `["logs",{}]`)}},
		{do: "up", in: res("4", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`),
			ownCall(5, "eth_getBlockByNumber", `["latest",false]`)}},
		{do: "up", in: res("3", `"0x1388"`)},
	}
	head := res("5", hdr(5000, "a", "9"))
	// history is c1's history, one log per range, in block order.
	history := []string{
		"c1< " + push(`"0xs1"`, mined(500, 0, "1")),
		"c1< " + push(`"0xs1"`, mined(1500, 0, "2")),
		"c1< " + push(`"0xs1"`, mined(2500, 0, "3")),
		"c1< " + push(`"0xs1"`, mined(3500, 0, "4")),
		"c1< " + push(`"0xs1"`, mined(4500, 0, "5")),
	}
	logs := func(uid string, n int, h string) string { return res(uid, "["+mined(n, 0, h)+"]") }
	rows := []scriptRow{
		{name: "a_client_flood_past_the_bound_goes_before_history", cfg: cfg(2), steps: append(append([]step(nil), start...),
			// The head request holds one slot, c2's first call the other.
			step{do: "c2", in: est(`"a"`), want: []string{sent(6)}},
			step{do: "c2", in: est(`"b"`)}, // queued: uid 7
			step{do: "c2", in: est(`"c"`)}, // uid 8
			// The head's answer frees a slot: c2's queued call takes
			// it; the five ranges wait behind c2's queue.
			step{do: "up", in: head, want: []string{sent(7)}, counts: map[string]int{"history requests": 3}},
			step{do: "up", in: res("6", "6"), want: []string{`c2< ` + res(`"a"`, "6"), sent(8)}},
			// The queue is empty: each freed slot goes to history.
			step{do: "up", in: res("7", "7"), want: []string{`c2< ` + res(`"b"`, "7"), getLogsRange(9, 1, 1000)}},
			step{do: "up", in: res("8", "8"), want: []string{`c2< ` + res(`"c"`, "8"), getLogsRange(10, 1001, 2000)}},
			// A new call past the bound goes before the next range.
			step{do: "c2", in: est(`"d"`)}, // uid 11
			step{do: "up", in: logs("9", 500, "1"), want: []string{sent(11)}},
			step{do: "up", in: res("11", "11"), want: []string{`c2< ` + res(`"d"`, "11"), getLogsRange(12, 2001, 3000)}},
			step{do: "up", in: logs("12", 2500, "3"), want: []string{getLogsRange(13, 3001, 4000)}},
			step{do: "up", in: logs("13", 3500, "4"), want: []string{getLogsRange(14, 4001, 5000)}},
			step{do: "up", in: logs("14", 4500, "5")},
			// Exact once the flood is over: every range once, in order.
			step{do: "up", in: logs("10", 1500, "2"), want: history, counts: map[string]int{"history requests": 8, "history logs": 5}},
		)},
		{name: "the_cap_holds_with_the_bound_off", cfg: cfg(0), steps: append(append([]step(nil), start...),
			step{do: "up", in: head, want: []string{getLogsRange(6, 1, 1000), getLogsRange(7, 1001, 2000), getLogsRange(8, 2001, 3000), getLogsRange(9, 3001, 4000)}},
			step{do: "up", in: logs("7", 1500, "2"), want: []string{getLogsRange(10, 4001, 5000)}},
			step{do: "up", in: logs("10", 4500, "5")},
			step{do: "up", in: logs("9", 3500, "4")},
			step{do: "up", in: logs("8", 2500, "3")},
			step{do: "up", in: logs("6", 500, "1"), want: history, counts: map[string]int{"history requests": 8, "history logs": 5}},
		)},
		{name: "a_departed_subscribers_held_requests_are_never_sent", cfg: cfg(1), steps: append(append([]step(nil), start...),
			step{do: "c2", in: est(`"a"`)}, // queued behind the head request: uid 6
			step{do: "up", in: head, want: []string{sent(6)}},
			// c1 leaves with its five ranges held: the key's last
			// member, so the node's subscription ends too.
			step{do: "gone c1", want: []string{"up> " + `{"jsonrpc":"2.0","id":7,"method":"eth_unsubscribe","params":["0xaa"]}`}},
			step{do: "up", in: res("6", "6"), want: []string{`c2< ` + res(`"a"`, "6")}},
			step{do: "tick", at: 30 * sec},
		)},
		// Only history is paced: the backfill after a cut keeps a plain
		// subscription gap-free at once, client calls queued or not.
		{name: "a_backfill_after_a_cut_is_not_paced", cfg: cfg(1), steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", `["newHeads"]`), want: []string{"up> " + upSub("1", `["newHeads"]`)}},
			{do: "up", in: res("1", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`)}},
			{do: "up", in: push(`"0xaa"`, hdr(16, "a", "9")), want: []string{"c1< " + push(`"0xs1"`, hdr(16, "a", "9"))}},
			{do: "c2", in: est(`"a"`), want: []string{sent(2)}},
			{do: "c2", in: est(`"b"`)}, // queued: uid 3
			{do: "up", in: push(`"0xaa"`, hdr(19, "d", "c")), want: []string{
				ownCall(4, "eth_getBlockByNumber", `["0x11",false]`),
				ownCall(5, "eth_getBlockByNumber", `["0x12",false]`),
			}},
		}},
	}
	runScripts(t, rows)
}
