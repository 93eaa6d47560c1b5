package core

import (
	"fmt"
	"strings"
	"testing"
)

// hdr is a newHeads header of block n whose hash and parent hash are 64
// times the hex digits h and p.
func hdr(n int, h, p string) string {
	return fmt.Sprintf(`{"number":"0x%x","hash":"0x%s","parentHash":"0x%s"}`, n, strings.Repeat(h, 64), strings.Repeat(p, 64))
}

// filled is hdr(n, h, p) as the gap machine delivers a block it fetched:
// in the layout of geth's newHeads object, the fields it did not get null.
func filled(n int, h, p string) string {
	return fmt.Sprintf(`{"parentHash":"0x%s","sha3Uncles":null,"miner":null,"stateRoot":null,"transactionsRoot":null,`+
		`"receiptsRoot":null,"logsBloom":null,"difficulty":null,"number":"0x%x","gasLimit":null,"gasUsed":null,"timestamp":null,`+
		`"extraData":null,"mixHash":null,"nonce":null,"baseFeePerGas":null,"withdrawalsRoot":null,"blobGasUsed":null,`+
		`"excessBlobGas":null,"parentBeaconBlockRoot":null,"requestsHash":null,"blockAccessListHash":null,"slotNumber":null,"hash":"0x%s"}`,
		strings.Repeat(p, 64), n, strings.Repeat(h, 64))
}

// mined is a log of block n (whose hash is 64 times h) at index idx.
func mined(n, idx int, h string) string {
	return fmt.Sprintf(`{"address":"0x01","topics":[],"data":"0x","blockNumber":"0x%x","blockHash":"0x%s",`+
		`"transactionHash":"0x%s","transactionIndex":"0x0","logIndex":"0x%x","removed":false}`,
		n, strings.Repeat(h, 64), strings.Repeat("f", 64), idx)
}

// logsByHash is muxd's own eth_getLogs of the block whose hash is 64 times h.
func logsByHash(uid int, h string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"eth_getLogs","params":[{"blockHash":"0x%s"}]}`, uid, strings.Repeat(h, 64))
}

// byNumber is muxd's own eth_getBlockByNumber for block n under upstream id uid.
func byNumber(uid, n int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"eth_getBlockByNumber","params":["0x%x",false]}`, uid, n)
}

// TestBackfillGlue covers the core's part of gap-free subscriptions
// (DESIGN §2): the gap machine's requests go upstream as muxd's own, their
// answers come back to it, and what it delivers is fanned out to the key's
// members under their ids.
func TestBackfillGlue(t *testing.T) {
	backfill := func(c *Config) { c.BackfillBlocks = 8 }
	runScripts(t, []scriptRow{
		{name: "head_jump_fetches_the_missing_blocks_by_number", cfg: backfill, steps: liveHeads([]step{
			{do: "c2", in: sub("1", heads), want: []string{"c2< " + res("1", `"0xs2"`)}},
			{do: "up", in: push(`"0xaa"`, hdr(16, "a", "9")), want: []string{"c1< " + push(`"0xs1"`, hdr(16, "a", "9")), "c2< " + push(`"0xs2"`, hdr(16, "a", "9"))}},
			{do: "up", in: push(`"0xaa"`, hdr(19, "d", "c")), want: []string{"up> " + byNumber(2, 17), "up> " + byNumber(3, 18)}},
			{do: "up", in: res("2", hdr(17, "b", "a")), want: []string{"c1< " + push(`"0xs1"`, filled(17, "b", "a")), "c2< " + push(`"0xs2"`, filled(17, "b", "a"))}},
			{do: "up", in: res("3", hdr(18, "c", "b")), want: []string{
				"c1< " + push(`"0xs1"`, filled(18, "c", "b")), "c2< " + push(`"0xs2"`, filled(18, "c", "b")),
				"c1< " + push(`"0xs1"`, hdr(19, "d", "c")), "c2< " + push(`"0xs2"`, hdr(19, "d", "c")),
			}, counts: map[string]int{"backfilled newHeads": 2}},
			{do: "up", in: push(`"0xaa"`, hdr(20, "e", "d")), want: []string{"c1< " + push(`"0xs1"`, hdr(20, "e", "d")), "c2< " + push(`"0xs2"`, hdr(20, "e", "d"))}},
		})},
		{name: "backfill_request_errors_and_times_out_then_is_asked_again", cfg: backfill, steps: liveHeads([]step{
			{do: "up", in: push(`"0xaa"`, hdr(16, "a", "9")), want: []string{"c1< " + push(`"0xs1"`, hdr(16, "a", "9"))}},
			{do: "up", in: push(`"0xaa"`, hdr(18, "c", "b")), want: []string{"up> " + byNumber(2, 17)}},
			{do: "up", in: `{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"busy"}}`},
			{do: "tick", at: 1 * sec, want: []string{"up> " + byNumber(3, 17)}},
			// Timed out: asked again after the retry delay.
			{do: "tick", at: 11 * sec},
			{do: "tick", at: 12 * sec, want: []string{"up> " + byNumber(4, 17)}},
			{do: "up", in: res("3", hdr(17, "b", "a")), want: []string{"drop unknown_id"}},
			{do: "up", in: res("4", hdr(17, "b", "a")), want: []string{
				"c1< " + push(`"0xs1"`, filled(17, "b", "a")), "c1< " + push(`"0xs1"`, hdr(18, "c", "b")),
			}},
		})},
		{name: "logs_key_asks_where_it_starts", cfg: backfill, steps: []step{
			{do: "join"}, {do: "connect"},
			// With its eth_subscribe, ahead of it.
			{do: "c1", in: sub("1", `["logs",{}]`), want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}`, "up> " + upSub("2", `["logs",{}]`)}},
			{do: "up", in: res("2", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`)}},
			{do: "up", in: res("1", `"0x10"`)},
			{do: "c1", in: unsub("2", `"0xs1"`), want: []string{"c1< " + res("2", "true"), "up> " + upUnsub("3", `"0xaa"`)}},
		}},
		{name: "logs_key_cut_before_it_knows_where_it_starts_asks_again", cfg: backfill, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", `["logs",{}]`), want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}`, "up> " + upSub("2", `["logs",{}]`)}},
			{do: "lost"},
			{do: "connect", want: []string{"up> " + upSub("3", `["logs",{}]`)}},
			{do: "up", in: res("3", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`), `up> {"jsonrpc":"2.0","id":4,"method":"eth_blockNumber","params":[]}`},
				counts: map[string]int{"gap logs unavailable": 0}},
		}},
		{name: "logs_missed_during_a_reconnect_are_backfilled_once", cfg: backfill, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", `["logs",{}]`), want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}`, "up> " + upSub("2", `["logs",{}]`)}},
			{do: "up", in: res("2", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`)}},
			{do: "up", in: res("1", `"0x8"`)},
			{do: "up", in: push(`"0xaa"`, mined(9, 0, "9")), want: []string{"c1< " + push(`"0xs1"`, mined(9, 0, "9"))}},
			{do: "lost"},
			{do: "connect", want: []string{"up> " + upSub("3", `["logs",{}]`)}},
			// Live again: the head and the check of the remembered block go together.
			{do: "up", in: res("3", `"0xbb"`), want: []string{
				`up> {"jsonrpc":"2.0","id":4,"method":"eth_getBlockByNumber","params":["latest",false]}`,
				"up> " + byNumber(5, 9),
			}},
			{do: "up", in: res("4", hdr(11, "b", "a"))},
			// Block 10, known only as the head's parent, has its header
			// asked by hash alongside its logs (the blocks fetched are
			// checked to be one chain).
			{do: "up", in: res("5", hdr(9, "9", "8")), want: []string{"up> " + logsByHash(6, "9"), "up> " + logsByHash(7, "a"),
				`up> {"jsonrpc":"2.0","id":8,"method":"eth_getBlockByHash","params":["0x` + strings.Repeat("a", 64) + `",false]}`, "up> " + logsByHash(9, "b")}},
			{do: "up", in: res("6", "["+mined(9, 0, "9")+"]")},
			{do: "up", in: res("9", "[]")},
			{do: "up", in: res("8", hdr(10, "a", "9"))},
			// Block 9's log went out live already; block 10's goes once.
			{do: "up", in: res("7", "["+mined(10, 0, "a")+"]"), want: []string{"c1< " + push(`"0xs1"`, mined(10, 0, "a"))},
				counts: map[string]int{"backfilled logs": 1}},
		}},
		{name: "gap_notices_on:_each_client_of_the_key_is_told_in_band", cfg: func(c *Config) { c.BackfillBlocks = 8; c.GapNotices = true }, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", `["newPendingTransactions"]`), want: []string{"up> " + upSub("1", `["newPendingTransactions"]`)}},
			{do: "up", in: res("1", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`)}},
			{do: "lost"},
			{do: "connect", want: []string{"up> " + upSub("2", `["newPendingTransactions"]`)}},
			{do: "up", in: res("2", `"0xbb"`), want: []string{
				`c1< {"jsonrpc":"2.0","method":"muxd_subscriptionGap","params":{"subscription":"0xs1","result":{"kind":"newPendingTransactions","reason":"not_backfillable"}}}`,
			}, counts: map[string]int{"gap newPendingTransactions not_backfillable": 1}},
		}},
		{name: "gap_notices_name_the_blocks", cfg: func(c *Config) { c.BackfillBlocks = 2; c.GapNotices = true }, steps: liveHeads([]step{
			{do: "up", in: push(`"0xaa"`, hdr(16, "a", "9")), want: []string{"c1< " + push(`"0xs1"`, hdr(16, "a", "9"))}},
			// Head 30: the backfill delivers 28..30; below its floor it
			// looks for where the gap starts: block 16 is still the
			// node's.
			{do: "up", in: push(`"0xaa"`, hdr(30, "e", "d")), want: []string{"up> " + byNumber(2, 28), "up> " + byNumber(3, 29)}},
			{do: "up", in: res("2", hdr(28, "c", "b"))},
			{do: "up", in: res("3", hdr(29, "d", "c")), want: []string{"up> " + byNumber(4, 16)}},
			{do: "up", in: res("4", hdr(16, "a", "9")), want: []string{
				"c1< " + push(`"0xs1"`, filled(28, "c", "b")), "c1< " + push(`"0xs1"`, filled(29, "d", "c")), "c1< " + push(`"0xs1"`, hdr(30, "e", "d")),
				`c1< {"jsonrpc":"2.0","method":"muxd_subscriptionGap","params":{"subscription":"0xs1","result":{"kind":"newHeads","reason":"too_long","fromBlock":"0x11","toBlock":"0x1b"}}}`,
			}},
		})},
		{name: "resubscribe_of_a_kind_that_cannot_be_backfilled_counts_a_gap", cfg: backfill, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", `["newPendingTransactions"]`), want: []string{"up> " + upSub("1", `["newPendingTransactions"]`)}},
			{do: "up", in: res("1", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`)}},
			{do: "up", in: push(`"0xaa"`, `"0x12"`), want: []string{"c1< " + push(`"0xs1"`, `"0x12"`)}},
			{do: "lost"},
			{do: "connect", want: []string{"up> " + upSub("2", `["newPendingTransactions"]`)}},
			{do: "up", in: res("2", `"0xbb"`), counts: map[string]int{"gap newPendingTransactions not_backfillable": 1}},
		}},
	})
}
