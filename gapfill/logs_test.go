package gapfill

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const logsKey = `["logs",{"address":"0xaa"}]`

// logsOf returns the logs of blocks from..to of chain c: two per block for
// address 0xaa and one for 0xbb.
func logsOf(c map[uint64]blk, from, to uint64) []lg {
	var out []lg
	for n := from; n <= to; n++ {
		out = append(out, lg{n, c[n].hash, 0, "0xaa"}, lg{n, c[n].hash, 1, "0xbb"}, lg{n, c[n].hash, 2, "0xaa"})
	}
	return out
}

func only(ls []lg, addr string) []lg {
	return slices.DeleteFunc(slices.Clone(ls), func(l lg) bool { return l.addr != addr })
}

// deliveredLogs returns what was delivered as logString does for logs.
func (h *harness) deliveredLogs() []string { return h.delivered("", parseLogString) }

// deliveredLogsTo returns what was delivered to key, as deliveredLogs.
func (h *harness) deliveredLogsTo(key string) []string { return h.delivered(key, parseLogString) }

func parseLogString(r []byte) (string, bool) {
	l, ok := parseLog(r)
	if !ok {
		return "", false
	}
	return logString(l.block, l.hash, l.index, l.removed), true
}

// logString is a log as the tests compare it: "block/hash-branch/index/removed".
func logString(block uint64, hash string, index uint64, removed bool) string {
	return fmt.Sprintf("%d/%s/%d/%t", block, hash[2:18], index, removed)
}

func logStrings(ls []lg, removed bool) []string {
	var s []string
	for _, l := range ls {
		s = append(s, logString(l.block, l.hash, l.index, removed))
	}
	return s
}

// TestLogs is the table of logs rules across a reconnect: logs of blocks
// up to `before` were pushed live, the connection was lost, the node went
// on to `head` (on its own chain), and the key became live again.
func TestLogs(t *testing.T) {
	main := chainOf(0, 0, 60)
	forked := chainOf(1, 8, 60)
	type tc struct {
		name    string
		cfg     Config
		before  uint64
		node    map[uint64]blk
		head    uint64
		hook    func(s Send) ([]byte, bool, bool)
		want    []string
		wantBF  int
		wantGap []Gap
	}
	tests := []tc{
		{name: "logs missed during the outage, in order, none twice", before: 10, node: main, head: 16,
			want: logStrings(only(logsOf(main, 11, 16), "0xaa"), false), wantBF: 12},
		{name: "reorg across the outage: removed:true first, then the new branch", before: 10, node: forked, head: 12,
			want:   append(logStrings(only(logsOf(main, 9, 10), "0xaa"), true), logStrings(only(logsOf(forked, 9, 12), "0xaa"), false)...),
			wantBF: 4 + 8},
		{name: "nothing missed", before: 10, node: main, head: 10},
		{name: "gap longer than backfill_blocks", cfg: Config{Blocks: 4}, before: 10, node: main, head: 30,
			want: logStrings(only(logsOf(main, 26, 30), "0xaa"), false), wantBF: 10, wantGap: []Gap{{Kind: "logs", Reason: "too_long"}}},
		{name: "eth_getLogs failing past Attempts: counted, the rest delivered", cfg: Config{Attempts: 2, LogsChunk: 2}, before: 10, node: main, head: 16,
			hook: func(s Send) ([]byte, bool, bool) {
				if s.Method == "eth_getLogs" && string(s.Params) == `[{"address":"0xaa","fromBlock":"0xc","toBlock":"0xd"}]` {
					return nil, true, false
				}
				return nil, false, false
			},
			want:    append(logStrings(only(logsOf(main, 11, 11), "0xaa"), false), logStrings(only(logsOf(main, 14, 16), "0xaa"), false)...),
			wantBF:  8,
			wantGap: []Gap{{Kind: "logs", Reason: "failed"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, head: 0, logs: append(logsOf(main, 1, 60), logsOf(forked, 9, 60)...)}
			h := lostAfterLogs(t, withBlocks(tt.cfg), n, tt.before) // baseline: block 0
			n.chain, n.head, n.hook = tt.node, tt.head, tt.hook
			h.out = nil
			h.apply(h.m.Live(logsKey, h.now), nil)
			for range 4 {
				h.tick(h.m.cfg.RetryDelay)
			}
			if got := h.deliveredLogs(); !slices.Equal(got, tt.want) {
				t.Errorf("delivered\n%v\nwant\n%v", got, tt.want)
			}
			if h.logs != tt.wantBF || !slices.Equal(h.gaps, tt.wantGap) {
				t.Errorf("backfilled %d gaps %v, want %d %v", h.logs, h.gaps, tt.wantBF, tt.wantGap)
			}
			if h.m.keys[logsKey].job != nil {
				t.Errorf("job still running")
			}
			// The node now pushes logs of blocks already delivered (its
			// subscription overlaps the backfill): dropped.
			h.out = nil
			for _, l := range only(logsOf(tt.node, tt.head, tt.head), "0xaa") {
				h.push(logsKey, logJSON(l, false))
			}
			if len(h.out) != 0 && tt.head > tt.before {
				t.Errorf("logs delivered twice: %v", h.deliveredLogs())
			}
		})
	}
}

// lostAfterLogs makes the logs key live on n, delivers the logs of
// address 0xaa of blocks 1..before of n's chain live, and loses the
// connection.
func lostAfterLogs(t *testing.T, cfg Config, n *node, before uint64) *harness {
	t.Helper()
	h := newHarness(t, cfg, n)
	h.apply(h.m.Live(logsKey, h.now), nil)
	for _, l := range only(logsOf(n.chain, 1, before), "0xaa") {
		h.push(logsKey, logJSON(l, false))
	}
	h.m.Disconnected()
	return h
}

// heldLogsJob delivers the logs of blocks 1..5 of n's chain live, loses the
// connection, moves the node to chain at head, and makes the key live again
// with the node holding its eth_getLogs answers: they are in *later, for the
// test to answer when it has pushed what comes live meanwhile.
func heldLogsJob(t *testing.T, n *node, chain map[uint64]blk, head uint64) (*harness, *[]Send) {
	t.Helper()
	h := lostAfterLogs(t, Config{Blocks: 128}, n, 5)
	n.chain, n.head = chain, head
	later := new([]Send)
	n.hook = func(s Send) ([]byte, bool, bool) {
		if s.Method == "eth_getLogs" {
			*later = append(*later, s)
			return nil, false, true
		}
		return nil, false, false
	}
	h.out = nil
	h.apply(h.m.Live(logsKey, h.now), nil)
	return h, later
}

// answerLater has n answer the requests it held, in order.
func answerLater(h *harness, n *node, later []Send) {
	n.hook = nil
	for _, s := range later {
		res, _ := n.answer(s)
		h.apply(h.m.Answer(s.ID, res, h.now), nil)
	}
}

// TestLogsHeldDuringJob: logs pushed by the new subscription while the
// backfill runs come after it, once each.
func TestLogsHeldDuringJob(t *testing.T) {
	main := chainOf(0, 0, 60)
	n := &node{chain: main, head: 0, logs: logsOf(main, 1, 60)}
	h, later := heldLogsJob(t, n, main, 8)
	// Logs of blocks 8 (also in the backfill) and 9 (after it) come live.
	for _, l := range only(logsOf(main, 8, 9), "0xaa") {
		h.push(logsKey, logJSON(l, false))
	}
	if len(h.out) != 0 || len(*later) == 0 {
		t.Fatalf("delivered %v before the backfill, getLogs %d", h.deliveredLogs(), len(*later))
	}
	answerLater(h, n, *later)
	if want := logStrings(only(logsOf(main, 6, 9), "0xaa"), false); !slices.Equal(h.deliveredLogs(), want) {
		t.Fatalf("delivered %v\nwant %v", h.deliveredLogs(), want)
	}
	// Blocks 5 (the last with a log, maybe not whole) to 8, each by
	// its hash: four blocks are few.
	var asked []string
	for _, s := range *later {
		var p []map[string]json.RawMessage
		_ = json.Unmarshal(s.Params, &p)
		asked = append(asked, string(p[0]["blockHash"]))
	}
	var want []string
	for b := uint64(5); b <= 8; b++ {
		want = append(want, `"`+main[b].hash+`"`)
	}
	slices.Sort(asked)
	if !slices.Equal(asked, want) {
		t.Fatalf("eth_getLogs by blockHash %v, want blocks 5..8 %v", asked, want)
	}
}

// TestLogsLive: live pushes are de-duplicated; a live removed:true is
// delivered and forgotten, so the log may come again on the new branch.
func TestLogsLive(t *testing.T) {
	main := chainOf(0, 0, 60)
	h := newHarness(t, Config{Blocks: 128}, &node{chain: main})
	h.apply(h.m.Live(logsKey, h.now), nil)
	a := lg{3, main[3].hash, 0, "0xaa"}
	h.push(logsKey, logJSON(a, false))
	h.push(logsKey, logJSON(a, false))
	h.push(logsKey, logJSON(a, true))
	h.push(logsKey, logJSON(a, false))
	h.push(logsKey, []byte(`{"n":1,"conn":1}`))
	want := []string{logStrings([]lg{a}, false)[0], logStrings([]lg{a}, true)[0], logStrings([]lg{a}, false)[0], `?{"n":1,"conn":1}`}
	if got := h.deliveredLogs(); !slices.Equal(got, want) {
		t.Fatalf("delivered %v\nwant %v", got, want)
	}
}

// TestOtherKinds: kinds that cannot be backfilled count a gap when they
// become live again; backfill off counts one for every kind.
func TestOtherKinds(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		key  string
		want Gap
	}{
		{Config{Blocks: 128}, `["newPendingTransactions"]`, Gap{Kind: "newPendingTransactions", Reason: "not_backfillable"}},
		{Config{Blocks: 128}, `["nodeSpecific"]`, Gap{Kind: "other", Reason: "not_backfillable"}},
		{Config{}, headsKey, Gap{Kind: "newHeads", Reason: "disabled"}},
		{Config{}, logsKey, Gap{Kind: "logs", Reason: "disabled"}},
	} {
		n := &node{}
		h := newHarness(t, tt.cfg, n)
		h.apply(h.m.Live(tt.key, h.now), nil)
		h.m.Disconnected()
		h.apply(h.m.Live(tt.key, h.now), nil)
		if !slices.Equal(h.gaps, []Gap{tt.want}) || len(n.seen) != 0 {
			t.Errorf("%s: gaps %v, sent %v", tt.key, h.gaps, n.seen)
		}
	}
}

// pushOrphaned has the node push, live, the logs orphaned, then their
// removals, then the logs fresh of the branch that replaced them.
func pushOrphaned(h *harness, orphaned, fresh []lg) {
	for _, l := range orphaned {
		h.push(logsKey, logJSON(l, false))
	}
	for _, l := range orphaned {
		h.push(logsKey, logJSON(l, true))
	}
	for _, l := range fresh {
		h.push(logsKey, logJSON(l, false))
	}
}

// TestLogsStaleHeldAfterReorg: while a backfill runs, the node pushes a log
// of a block that a reorg then replaces (A), its removed:true, and the log
// again on the new branch (B); the backfill's eth_getLogs already returned
// B. The subscriber gets B once, and neither A nor a removal of a log it was
// never sent. (Found by the chaos suite: B, A, A removed, B.)
func TestLogsStaleHeldAfterReorg(t *testing.T) {
	main := chainOf(0, 0, 60)
	forked := chainOf(1, 7, 60) // block 8 differs
	n := &node{chain: main, head: 0, logs: append(logsOf(main, 1, 60), logsOf(forked, 8, 60)...)}
	h, later := heldLogsJob(t, n, forked, 8)
	pushOrphaned(h, only(logsOf(main, 8, 8), "0xaa"), only(logsOf(forked, 8, 8), "0xaa"))
	if len(h.out) != 0 || len(*later) == 0 {
		t.Fatalf("delivered %v before the backfill, getLogs %d", h.deliveredLogs(), len(*later))
	}
	answerLater(h, n, *later)
	want := logStrings(append(only(logsOf(main, 6, 7), "0xaa"), only(logsOf(forked, 8, 8), "0xaa")...), false)
	if got := h.deliveredLogs(); !slices.Equal(got, want) {
		t.Fatalf("delivered\n%v\nwant\n%v", got, want)
	}
}

// TestLogsStaleHeldNoMatchOnNewBranch: while a backfill runs, the node
// pushes a log of block 8 (A), then a reorg replaces block 8 by one with
// no matching log (B) and the node pushes A's removal; the backfill's
// eth_getLogs already returned the chain with B. The subscriber gets
// neither A nor its removal: A would come after logs of later blocks or on
// no branch it was given. (Found by the chaos suite: 125/1, then 123/0 of
// a block orphaned before the backfill's answer.)
func TestLogsStaleHeldNoMatchOnNewBranch(t *testing.T) {
	main := chainOf(0, 0, 60)
	forked := chainOf(1, 7, 60) // block 8 differs, and has no logs
	n := &node{chain: main, head: 0, logs: append(logsOf(main, 1, 60), logsOf(forked, 9, 60)...)}
	h, later := heldLogsJob(t, n, forked, 9)
	pushOrphaned(h, only(logsOf(main, 8, 8), "0xaa"), only(logsOf(forked, 9, 9), "0xaa"))
	if len(h.out) != 0 || len(*later) != 1 {
		t.Fatalf("delivered %v before the backfill, getLogs %d", h.deliveredLogs(), len(*later))
	}
	answerLater(h, n, *later)
	want := logStrings(append(only(logsOf(main, 6, 7), "0xaa"), only(logsOf(forked, 9, 9), "0xaa")...), false)
	if got := h.deliveredLogs(); !slices.Equal(got, want) {
		t.Fatalf("delivered\n%v\nwant\n%v", got, want)
	}
	// A log held with no removal after it is delivered as before.
	h.out = nil
	h.push(logsKey, logJSON(only(logsOf(forked, 10, 10), "0xaa")[0], false))
	if got := h.deliveredLogs(); len(got) != 1 {
		t.Fatalf("next live log: delivered %v", got)
	}
}

// TestLogsStaleAfterJob: as TestLogsStaleHeldNoMatchOnNewBranch, but A's
// removal comes after the backfill ended, and A itself either while it ran
// (held) or after it: the node's answers (from the chain as it is)
// overtook its pushes (of each event in turn). The backfill delivered
// block 9 of the new branch; A would follow it out of chain order, so it
// goes neither, and nor does its removal. (Found by the chaos suite:
// 164/0..164/3, then 163/0 of a block orphaned by the reorg that made 164.)
func TestLogsStaleAfterJob(t *testing.T) {
	for _, heldA := range []bool{true, false} {
		t.Run(fmt.Sprintf("held=%v", heldA), func(t *testing.T) {
			main := chainOf(0, 0, 60)
			forked := chainOf(1, 7, 60) // block 8 differs, and has no logs
			n := &node{chain: main, head: 0, logs: append(logsOf(main, 1, 60), logsOf(forked, 9, 60)...)}
			h, later := heldLogsJob(t, n, forked, 9)
			orphaned := only(logsOf(main, 8, 8), "0xaa")
			pushA := func() {
				for _, l := range orphaned {
					h.push(logsKey, logJSON(l, false))
				}
			}
			if heldA {
				pushA()
			}
			if len(h.out) != 0 || len(*later) != 1 {
				t.Fatalf("delivered %v before the backfill, getLogs %d", h.deliveredLogs(), len(*later))
			}
			answerLater(h, n, *later)
			if !heldA {
				pushA()
			}
			for _, l := range orphaned {
				h.push(logsKey, logJSON(l, true))
			}
			for _, l := range only(logsOf(forked, 9, 10), "0xaa") {
				h.push(logsKey, logJSON(l, false))
			}
			want := logStrings(append(only(logsOf(main, 6, 7), "0xaa"), only(logsOf(forked, 9, 10), "0xaa")...), false)
			if got := h.deliveredLogs(); !slices.Equal(got, want) {
				t.Fatalf("delivered\n%v\nwant\n%v", got, want)
			}
			// Held before the backfill's answer for block 8 came in,
			// without being in it: stale, dropped. Pushed after it,
			// counted once per log: a stale one cannot be told from a
			// canonical one the backfill's answers skipped.
			var wantGaps []Gap
			if !heldA {
				wantGaps = []Gap{{Kind: "logs", Reason: "late"}, {Kind: "logs", Reason: "late"}}
			}
			if !slices.Equal(h.gaps, wantGaps) {
				t.Fatalf("gaps %v, want %v", h.gaps, wantGaps)
			}
		})
	}
}

// TestLogsRangeStraddlesReorg: a backfill's range chunks are answered on
// either side of a reorg: blocks 7..8 before it, block 9 after it, on the
// new branch, whose block 8 has logs; the node pushes those meanwhile
// (held), after the removals of the old block 8's if it had any. Either
// way the job starts over and delivers the new branch whole (block 10
// came meanwhile), and nothing is late: with a removal (of a log the job
// fetched) because of it; without one because block 9's logs came under
// another hash than the head's answer named for block 9 (before, the new
// block 8's logs were counted late, lost). (Found by the chaos suite: 164/0..3,
// then 163/0; and, traced, 202/0..2, 203/0..2, 202/0..2 removed, then the
// new 202/0, of a job whose chunk 171..202 was answered before a reorg and
// 203 after it.)
func TestLogsRangeStraddlesReorg(t *testing.T) {
	for _, old8 := range []bool{false, true} {
		t.Run(fmt.Sprintf("old block 8 with logs=%v", old8), func(t *testing.T) {
			main := chainOf(0, 0, 60)
			forked := chainOf(1, 7, 60) // blocks 8 on differ
			var logs []lg
			for _, l := range logsOf(main, 1, 60) {
				if l.block != 8 || old8 {
					logs = append(logs, l)
				}
			}
			n := &node{chain: main, head: 0, logs: append(logs, logsOf(forked, 8, 60)...)}
			h := lostAfterLogs(t, Config{Blocks: 128, LogsChunk: 2}, n, 5)
			n.head = 9
			var later []Send
			n.hook = func(s Send) ([]byte, bool, bool) {
				if s.Method == "eth_getLogs" {
					later = append(later, s)
					return nil, false, true
				}
				return nil, false, false
			}
			h.out = nil
			h.apply(h.m.Live(logsKey, h.now), nil)
			if len(later) != 3 {
				t.Fatalf("getLogs %d, want 3 chunks (5-6, 7-8, 9)", len(later))
			}
			answerLater(h, n, later[:2]) // on the main chain
			n.chain, n.head = forked, 10
			var gone []lg
			if old8 {
				gone = only(logsOf(main, 8, 8), "0xaa")
			}
			for _, l := range gone {
				h.push(logsKey, logJSON(l, true))
			}
			for _, l := range only(logsOf(forked, 8, 9), "0xaa") {
				h.push(logsKey, logJSON(l, false))
			}
			answerLater(h, n, later[2:]) // block 9 of the new branch
			want := logStrings(append(only(logsOf(main, 6, 7), "0xaa"), only(logsOf(forked, 8, 10), "0xaa")...), false)
			var wantGaps []Gap
			if got := h.deliveredLogs(); !slices.Equal(got, want) {
				t.Fatalf("delivered\n%v\nwant\n%v", got, want)
			}
			if !slices.Equal(h.gaps, wantGaps) {
				t.Fatalf("gaps %v, want %v", h.gaps, wantGaps)
			}
		})
	}
}

// TestLogsRoundTrips: a logs job after a reorg across the outage takes two
// round trips: the head and the remembered blocks' checks together, then
// eth_getLogs. (Each round trip was its own: head, a check per replaced
// block, then eth_getLogs; on a connection lost every few hundred
// milliseconds under load, such a job never finished.)
func TestLogsRoundTrips(t *testing.T) {
	main := chainOf(0, 0, 60)
	forked := chainOf(1, 8, 60) // 9 and 10 replaced
	n := &node{chain: main, head: 0, logs: append(logsOf(main, 1, 60), logsOf(forked, 9, 60)...)}
	h := lostAfterLogs(t, Config{Blocks: 128}, n, 10)
	n.chain, n.head = forked, 12
	var round []Send
	n.hook = func(s Send) ([]byte, bool, bool) {
		round = append(round, s)
		return nil, false, true // answered below, a round at a time
	}
	h.out = nil
	h.apply(h.m.Live(logsKey, h.now), nil)
	rounds := 0
	for len(round) > 0 && rounds < 10 {
		rounds++
		this := round
		round = nil
		for _, s := range this {
			n.hook = nil
			res, _ := n.answer(s)
			n.hook = func(s Send) ([]byte, bool, bool) {
				round = append(round, s)
				return nil, false, true
			}
			h.apply(h.m.Answer(s.ID, res, h.now), nil)
		}
	}
	want := append(logStrings(only(logsOf(main, 9, 10), "0xaa"), true), logStrings(only(logsOf(forked, 9, 12), "0xaa"), false)...)
	if got := h.deliveredLogs(); !slices.Equal(got, want) {
		t.Fatalf("delivered\n%v\nwant\n%v", got, want)
	}
	if rounds != 2 || len(h.gaps) != 0 {
		t.Errorf("%d round trips, gaps %v; want 2, none", rounds, h.gaps)
	}
}

// TestLogsHeadJump: on a live connection (no reconnect) the node's newHeads
// jumps by more than one block, and it pushed no logs for the blocks it
// skipped: the logs key fetches them (and the new head's) with its own
// filter and delivers them in order, once each, before what comes next.
func TestLogsHeadJump(t *testing.T) {
	main := chainOf(0, 0, 60)
	byNumber := func(n *node) (got []string) {
		for _, s := range n.seen {
			if s.Method == "eth_getBlockByNumber" && s.Key == logsKey { // the heads key backfills too
				got = append(got, string(s.Params))
			}
		}
		return got
	}
	getLogs := func(n *node) (got []string) {
		for _, s := range n.seen {
			if s.Method == "eth_getLogs" {
				var p []map[string]json.RawMessage
				_ = json.Unmarshal(s.Params, &p)
				if bh, ok := p[0]["blockHash"]; ok {
					got = append(got, "hash "+string(bh))
				} else {
					got = append(got, "range "+string(p[0]["fromBlock"])+".."+string(p[0]["toBlock"]))
				}
			}
		}
		slices.Sort(got)
		return got
	}
	hashQ := func(from, to uint64) (s []string) {
		for b := from; b <= to; b++ {
			s = append(s, `hash "`+main[b].hash+`"`)
		}
		return s
	}
	for _, tt := range []struct {
		name       string
		head       uint64
		liveBefore []lg // logs the node pushes before the jumping head
		want       []lg // logs delivered after those pushed before the jump (excluding liveBefore)
		wantLogs   []string
		wantByNum  []string
		wantGap    []Gap
	}{
		{name: "a jump of six: by range", head: 16,
			want: only(logsOf(main, 11, 16), "0xaa"), wantLogs: []string{`range "0xb".."0x10"`}},
		{name: "a jump of three: by blockHash, hashes from the head and a block by number", head: 13,
			want: only(logsOf(main, 11, 13), "0xaa"), wantLogs: hashQ(11, 13), wantByNum: []string{`["0xb",false]`}},
		{name: "a jump of two: by blockHash, both hashes from the head", head: 12,
			want: only(logsOf(main, 11, 12), "0xaa"), wantLogs: hashQ(11, 12)},
		// Logs pushed before the head that names their block wait for it.
		{name: "the node pushed every block's logs (geth): nothing twice", head: 13,
			liveBefore: only(logsOf(main, 11, 13), "0xaa"), want: only(logsOf(main, 11, 13), "0xaa"), wantLogs: hashQ(11, 13), wantByNum: []string{`["0xb",false]`}},
		{name: "the new head's logs came first: they wait for the head, the skipped ones go first", head: 13,
			liveBefore: only(logsOf(main, 13, 13), "0xaa"), want: only(logsOf(main, 11, 13), "0xaa"), wantLogs: hashQ(11, 13), wantByNum: []string{`["0xb",false]`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, head: 10, logs: logsOf(main, 1, 60)}
			h := newHarness(t, Config{Blocks: 128}, n)
			liveHeadsAndLogs(h, main, 10)
			n.seen = nil
			n.head = tt.head
			h.out, h.outKeys = nil, nil
			for _, l := range tt.liveBefore {
				h.push(logsKey, logJSON(l, false))
			}
			if got := h.deliveredLogsTo(logsKey); len(got) != 0 {
				t.Errorf("delivered before the head named their block: %v", got)
			}
			h.out, h.outKeys = nil, nil
			h.push(headsKey, headJSON(main[tt.head]))
			next := lg{tt.head + 1, main[tt.head+1].hash, 0, "0xaa"}
			h.push(logsKey, logJSON(next, false))
			h.push(headsKey, headJSON(main[tt.head+1]))
			got := h.deliveredLogsTo(logsKey)
			want := logStrings(append(slices.Clone(tt.want), next), false)
			if !slices.Equal(got, want) {
				t.Errorf("delivered\n%v\nwant\n%v", got, want)
			}
			if g := getLogs(n); !slices.Equal(g, tt.wantLogs) {
				t.Errorf("eth_getLogs %v, want %v", g, tt.wantLogs)
			}
			if g := byNumber(n); !slices.Equal(g, tt.wantByNum) {
				t.Errorf("eth_getBlockByNumber %v, want %v", g, tt.wantByNum)
			}
			var gaps []Gap
			for _, g := range h.gaps {
				if g.Kind == "logs" {
					gaps = append(gaps, g)
				}
			}
			if !slices.Equal(gaps, tt.wantGap) {
				t.Errorf("gaps %v, want %v", gaps, tt.wantGap)
			}
		})
	}
}

// TestLogsByHashWhenFew: after a reconnect, a missed range of at most
// ByHashBlocks blocks is fetched block by block with eth_getLogs
// {blockHash}; one block more is fetched by range. A by-hash answer that
// holds logs of another block counts as a failed request.
func TestLogsByHashWhenFew(t *testing.T) {
	main := chainOf(0, 0, 60)
	for _, tt := range []struct {
		name    string
		head    uint64
		hook    func(s Send) ([]byte, bool, bool)
		byHash  int
		ranges  int
		want    []lg
		wantGap []Gap
	}{
		// Blocks from 5 (the last with a log delivered, maybe not whole).
		{name: "four blocks: by hash", head: 8, byHash: 4, want: only(logsOf(main, 6, 8), "0xaa")},
		{name: "five blocks: by range", head: 9, ranges: 1, want: only(logsOf(main, 6, 9), "0xaa")},
		{name: "a by-hash answer for another block: failed, counted", head: 7, byHash: 2 + DefaultAttempts,
			hook: func(s Send) ([]byte, bool, bool) {
				if s.Method == "eth_getLogs" && strings.Contains(string(s.Params), main[7].hash) {
					return fmt.Appendf(nil, "[%s]", logJSON(lg{6, main[6].hash, 0, "0xaa"}, false)), true, false
				}
				return nil, false, false
			},
			want: only(logsOf(main, 6, 6), "0xaa"), wantGap: []Gap{{Kind: "logs", Reason: "failed"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, logs: logsOf(main, 1, 60)}
			h := lostAfterLogs(t, Config{Blocks: 128}, n, 5)
			n.head, n.hook, n.seen, h.out = tt.head, tt.hook, nil, nil
			h.apply(h.m.Live(logsKey, h.now), nil)
			for range 2 * DefaultAttempts {
				h.tick(h.m.cfg.RetryDelay)
			}
			byHash, ranges := 0, 0
			for _, s := range n.seen {
				switch {
				case s.Method != "eth_getLogs":
				case strings.Contains(string(s.Params), `"blockHash"`):
					byHash++
				default:
					ranges++
				}
			}
			if byHash != tt.byHash || ranges != tt.ranges {
				t.Errorf("eth_getLogs by hash %d, by range %d; want %d, %d", byHash, ranges, tt.byHash, tt.ranges)
			}
			if got, want := h.deliveredLogs(), logStrings(tt.want, false); !slices.Equal(got, want) {
				t.Errorf("delivered\n%v\nwant\n%v", got, want)
			}
			if !slices.Equal(h.gaps, tt.wantGap) {
				t.Errorf("gaps %v, want %v", h.gaps, tt.wantGap)
			}
		})
	}
}

// TestLogsHeadJumpDuringJob: a head jump while the key's reconnect job
// runs is fetched when that job ends, before what it held.
func TestLogsHeadJumpDuringJob(t *testing.T) {
	main := chainOf(0, 0, 60)
	n := &node{chain: main, logs: logsOf(main, 1, 60)}
	h := newHarness(t, Config{Blocks: 128}, n)
	liveHeadsAndLogs(h, main, 5)
	h.m.Disconnected()
	n.head = 8
	var later []Send
	n.hook = func(s Send) ([]byte, bool, bool) {
		if s.Key == logsKey && len(later) < 100 {
			later = append(later, s)
			return nil, false, true
		}
		return nil, false, false
	}
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.apply(h.m.Live(logsKey, h.now), nil) // job: head 8
	h.push(headsKey, headJSON(main[8]))
	n.head = 12
	h.push(headsKey, headJSON(main[12])) // a jump of four, the job still running
	h.push(logsKey, logJSON(lg{13, main[13].hash, 0, "0xaa"}, false))
	h.out, h.outKeys = nil, nil
	for len(later) > 0 {
		s := later[0]
		later = later[1:]
		res, _ := (&node{chain: main, head: 12, logs: n.logs}).answer(s)
		h.apply(h.m.Answer(s.ID, res, h.now), nil)
	}
	h.push(headsKey, headJSON(main[13])) // names the block of the held log 13
	got := h.deliveredLogsTo(logsKey)
	want := logStrings(append(only(logsOf(main, 6, 12), "0xaa"), lg{13, main[13].hash, 0, "0xaa"}), false)
	if !slices.Equal(got, want) || len(h.gaps) != 0 {
		t.Fatalf("delivered\n%v\nwant\n%v\ngaps %v", got, want, h.gaps)
	}
}

// liveHeadsAndLogs makes the heads key and the logs key live and pushes
// blocks 1 to last of chain live on both: each head, then its logs of
// address 0xaa.
func liveHeadsAndLogs(h *harness, chain map[uint64]blk, last uint64) {
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.apply(h.m.Live(logsKey, h.now), nil)
	for b := uint64(1); b <= last; b++ {
		h.push(headsKey, headJSON(chain[b]))
		for _, l := range only(logsOf(chain, b, b), "0xaa") {
			h.push(logsKey, logJSON(l, false))
		}
	}
}

// TestGapTooLongNamesBlocks: a gap past Blocks says which subscription
// missed which blocks (for the log line), for newHeads and for logs.
func TestGapTooLongNamesBlocks(t *testing.T) {
	main := chainOf(0, 0, 40)
	cfg := Config{Blocks: 4}

	n := &node{chain: main, head: 10}
	h := lostAfterLogs(t, cfg, n, 10)
	n.head = 30
	h.apply(h.m.Live(logsKey, h.now), nil)
	// Blocks 10..25 are not fetched: the node's head is 30, and the range
	// is [30-4, 30]. (Block 10's logs were delivered, but pushed after a
	// baseline of 10, below it: the key owes from the last log's block.)
	if want := []Gap{{Kind: "logs", Reason: "too_long", Key: logsKey, From: 10, To: 25}}; !slices.Equal(h.fullGaps, want) {
		t.Errorf("logs: gaps %+v, want %+v", h.fullGaps, want)
	}

	n = &node{chain: main, head: 10}
	h = newHarness(t, cfg, n)
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[10]))
	h.m.Disconnected()
	n.head = 30
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[30]))
	if want := []Gap{{Kind: "newHeads", Reason: "too_long", Key: headsKey, From: 11, To: 25}}; !slices.Equal(h.fullGaps, want) {
		t.Errorf("newHeads: gaps %+v, want %+v", h.fullGaps, want)
	}
}

// TestLogsQuietKeyCovered: a logs key whose filter matched nothing while
// the node went on announcing heads is covered up to those heads, so a
// reconnect fetches only the blocks since (not every block since its last
// log) and counts no too_long gap. A key that was not live on the
// connection (lost, not yet resubscribed) is not moved on.
func TestLogsQuietKeyCovered(t *testing.T) {
	main := chainOf(0, 0, 60)
	n := &node{chain: main, head: 10, logs: logsOf(main, 1, 10)} // no logs after block 10
	h := newHarness(t, Config{Blocks: 8}, n)
	liveHeadsAndLogs(h, main, 10)
	for b := uint64(11); b <= 40; b++ {
		n.head = b
		h.push(headsKey, headJSON(main[b]))
	}
	h.m.Disconnected()
	// Heads on the next connection before the logs key is live again
	// must not move it on: blocks 41 and 42 are still owed to it.
	n.head = 43
	n.seen = nil
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[43]))
	h.apply(h.m.Live(logsKey, h.now), nil)
	if len(h.fullGaps) != 0 {
		t.Errorf("gaps %+v, want none", h.fullGaps)
	}
	lowest := uint64(1 << 62)
	for _, s := range n.seen {
		if s.Method != "eth_getLogs" {
			continue
		}
		var p []map[string]json.RawMessage
		if err := json.Unmarshal(s.Params, &p); err != nil || len(p) != 1 {
			t.Fatalf("eth_getLogs params %s", s.Params)
		}
		if from, ok := p[0]["fromBlock"]; ok {
			var hex string
			_ = json.Unmarshal(from, &hex)
			v, err := strconv.ParseUint(strings.TrimPrefix(hex, "0x"), 16, 64)
			if err != nil {
				t.Fatalf("fromBlock %s", from)
			}
			lowest = min(lowest, v)
			continue
		}
		for b, blk := range main {
			if string(p[0]["blockHash"]) == `"`+blk.hash+`"` {
				lowest = min(lowest, b)
			}
		}
	}
	// Covered up to 40-2 when the connection was lost: 39 is the first
	// block fetched.
	if lowest != 39 {
		t.Errorf("lowest block fetched for the logs key: %d, want 39 (gaps %+v, pending %d)", lowest, h.fullGaps, len(h.pending))
	}
}

// TestLogsFilterAsNodeReadsIt: the backfill asks eth_getLogs with the
// filter as the node reads the subscription's: member names matched
// without regard to case, the last spelling winning, range members in any
// spelling dropped (the backfill sets its own).
func TestLogsFilterAsNodeReadsIt(t *testing.T) {
	for _, tc := range []struct {
		name, key, want string
	}{
		{"plain", `["logs",{"address":"0x1","topics":["0xa"]}]`, `[{"address":"0x1","fromBlock":"0x5","toBlock":"0x6","topics":["0xa"]}]`},
		{"the last spelling of address wins", `["logs",{"address":"0x1","ADDRESS":"0x2"}]`, `[{"address":"0x2","fromBlock":"0x5","toBlock":"0x6"}]`},
		{"the last spelling of topics wins", `["logs",{"TOPICS":["0xa"],"topics":["0xb"]}]`, `[{"fromBlock":"0x5","toBlock":"0x6","topics":["0xb"]}]`},
		{"range members in any spelling dropped", `["logs",{"address":"0x1","blockhash":"0x00","FromBlock":"0x1","TOBLOCK":"0x2"}]`, `[{"address":"0x1","fromBlock":"0x5","toBlock":"0x6"}]`},
		{"escaped name", `["logs",{"address":"0x1","\u0061ddress":"0x3"}]`, `[{"address":"0x3","fromBlock":"0x5","toBlock":"0x6"}]`},
		{"other members kept", `["logs",{"address":"0x1","extra":true}]`, `[{"address":"0x1","extra":true,"fromBlock":"0x5","toBlock":"0x6"}]`},
		{"no filter", `["logs"]`, `[{"fromBlock":"0x5","toBlock":"0x6"}]`},
		{"not an object", `["logs",[1]]`, `[{"fromBlock":"0x5","toBlock":"0x6"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, f := subscriptionName(tc.key)
			if name != "logs" {
				t.Fatalf("name %q", name)
			}
			if got := string(getLogsParams(f, 5, 6)); got != tc.want {
				t.Errorf("eth_getLogs params\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestLogsForkMovesUnderJob: a reorg reaches the fork point a logs job
// found after its checks were answered (the node reorged while the job
// waited for its head). The job must not deliver the new branch's logs
// after the old branch's without their removal: the node's later answer
// names another parent, or it pushes the removal of a log the key was
// delivered, and the job finds the fork again. (Found by the chaos suite:
// log 33/2 of a new branch after 32/1 of the old, never removed.)
func TestLogsForkMovesUnderJob(t *testing.T) {
	main := chainOf(0, 0, 60)
	forked := chainOf(1, 4, 60) // blocks 5 on differ
	tests := []struct {
		name      string
		head      uint64 // the node's head when it answers the job's head request
		pushGone  bool   // the node pushes the removal of main 5's logs
		wantCheck int    // eth_getBlockByNumber checks of block 5 asked
	}{
		{name: "the head's parent and the pushed removal say so", head: 6, pushGone: true, wantCheck: 2},
		{name: "only the pushed removal says so", head: 7, pushGone: true, wantCheck: 2},
		{name: "only the head's parent says so (a node that pushes no removals)", head: 6, wantCheck: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, logs: append(logsOf(main, 1, 60), logsOf(forked, 5, 60)...)}
			h := lostAfterLogs(t, Config{Blocks: 128}, n, 5)
			var headReq []Send
			n.hook = func(s Send) ([]byte, bool, bool) {
				if s.Method == "eth_getBlockByNumber" && string(s.Params) == `["latest",false]` && headReq == nil {
					headReq = append(headReq, s)
					return nil, false, true
				}
				return nil, false, false
			}
			n.head = 5
			h.out = nil
			h.apply(h.m.Live(logsKey, h.now), nil) // the checks are answered on main
			if len(headReq) != 1 || len(h.out) != 0 {
				t.Fatalf("head asked %d times, delivered %v before the job ends", len(headReq), h.deliveredLogs())
			}
			// The node reorgs below the fork point the job found and
			// pushes what it pushes to a live subscription.
			n.chain, n.head = forked, tt.head
			if tt.pushGone {
				for _, l := range only(logsOf(main, 5, 5), "0xaa") {
					h.push(logsKey, logJSON(l, true))
				}
			}
			for _, l := range only(logsOf(forked, 5, tt.head), "0xaa") {
				h.push(logsKey, logJSON(l, false))
			}
			answerLater(h, n, headReq)
			for range 4 {
				h.tick(h.m.cfg.RetryDelay)
			}
			want := append(logStrings(only(logsOf(main, 5, 5), "0xaa"), true), logStrings(only(logsOf(forked, 5, tt.head), "0xaa"), false)...)
			if got := h.deliveredLogs(); !slices.Equal(got, want) {
				t.Errorf("delivered\n%v\nwant\n%v", got, want)
			}
			if len(h.gaps) != 0 || h.m.keys[logsKey].job != nil {
				t.Errorf("gaps %v, job running %v; want none, false", h.gaps, h.m.keys[logsKey].job != nil)
			}
			checks := 0
			for _, s := range n.seen {
				if s.Method == "eth_getBlockByNumber" && string(s.Params) == `["0x5",false]` {
					checks++
				}
			}
			if checks != tt.wantCheck {
				t.Errorf("block 5 checked %d times, want %d (once more after the fork moved)", checks, tt.wantCheck)
			}
		})
	}
}
