package gapfill

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

const histKey = logsKey + "#history"

// replayLogs applies what key was delivered as a subscriber does: a log
// is added, a removal takes away the log it names (which must have been
// delivered and not removed). It returns the logs that stand, in delivery
// order, and fails on a duplicate, a removal of nothing, or a log out of
// (block, index) order among those standing.
func replayLogs(t *testing.T, h *harness, key string) []string {
	t.Helper()
	var stand []logEntry
	for i, r := range h.out {
		if h.outKeys[i] != key {
			continue
		}
		l, ok := parseLog(r)
		if !ok {
			t.Fatalf("delivered no log: %s", r)
		}
		at := slices.IndexFunc(stand, func(x logEntry) bool { return x.hash == l.hash && x.index == l.index })
		if l.removed {
			if at < 0 {
				t.Fatalf("removal of a log never delivered: %s", r)
			}
			stand = slices.Delete(stand, at, at+1)
			continue
		}
		if at >= 0 {
			t.Fatalf("delivered twice: %s", r)
		}
		if n := len(stand); n > 0 && !(logPos{stand[n-1].block, stand[n-1].index}).before(logPos{l.block, l.index}) {
			t.Fatalf("out of order: %s after block %d index %d", r, stand[n-1].block, stand[n-1].index)
		}
		stand = append(stand, l)
	}
	var s []string
	for _, l := range stand {
		s = append(s, logString(l.block, l.hash, l.index, false))
	}
	return s
}

// getLogsRangeOf returns the fromBlock and toBlock of an eth_getLogs by range.
func getLogsRangeOf(t *testing.T, s Send) (uint64, uint64) {
	t.Helper()
	var p []struct {
		From string `json:"fromBlock"`
		To   string `json:"toBlock"`
	}
	if json.Unmarshal(s.Params, &p) != nil || len(p) != 1 {
		t.Fatalf("eth_getLogs params %s", s.Params)
	}
	from, ok1 := parseQuantityJSON([]byte(`"` + p[0].From + `"`))
	to, ok2 := parseQuantityJSON([]byte(`"` + p[0].To + `"`))
	if !ok1 || !ok2 {
		t.Fatalf("eth_getLogs params %s: no range", s.Params)
	}
	return from, to
}

// TestHistory is the table of the seam between a history subscription's
// history and its live logs: the history key (over logsKey's filter, from
// block 5) is started with the node at head 20 and its eth_getLogs
// answers held; during may push what the node pushes meanwhile and change
// the node; then the answers come, and after may push more. What the key
// was delivered, replayed as a subscriber applies it, must be the
// filter's logs of the node's chain from block 5 to its head, in order,
// once each.
func TestHistory(t *testing.T) {
	main := chainOf(0, 0, 60)
	forked := chainOf(1, 19, 60) // blocks 20 on differ: a reorg at the seam
	deep := chainOf(2, 9, 60)    // blocks 10 on differ: inside the history
	tests := []struct {
		name   string
		cfg    Config
		during func(h *harness, n *node)
		after  func(h *harness, n *node)
		chain  map[uint64]blk
		head   uint64
	}{
		{name: "history then live: the pushes overlapping it go once", chain: main, head: 22,
			during: func(h *harness, n *node) {
				// Block 20's logs came live too (the subscription
				// was live before the head was asked for).
				pushLogs(h, only(logsOf(main, 20, 20), "0xaa"), false)
			},
			after: func(h *harness, n *node) {
				n.head = 22
				pushLogs(h, only(logsOf(main, 20, 22), "0xaa"), false)
			}},
		{name: "blocks mined while history is fetched", chain: main, head: 23,
			during: func(h *harness, n *node) {
				n.head = 23
				pushLogs(h, only(logsOf(main, 21, 23), "0xaa"), false)
			}},
		{name: "reorg at the seam while history is fetched", chain: forked, head: 21,
			during: func(h *harness, n *node) {
				// The node answers with the old branch (its answers
				// are computed before the reorg) ...
				h.answerHeld(n, nil)
				n.chain, n.head = forked, 21
				pushLogs(h, only(logsOf(main, 20, 20), "0xaa"), true)
				pushLogs(h, only(logsOf(forked, 20, 21), "0xaa"), false)
			}},
		{name: "reorg at the seam after history", chain: forked, head: 21,
			after: func(h *harness, n *node) {
				n.chain, n.head = forked, 21
				pushLogs(h, only(logsOf(main, 20, 20), "0xaa"), true)
				pushLogs(h, only(logsOf(forked, 20, 21), "0xaa"), false)
			}},
		{name: "reorg inside history while it is fetched", cfg: Config{HistoryChunk: 4}, chain: deep, head: 21,
			during: func(h *harness, n *node) {
				// The first chunks are answered on the old branch, the
				// rest after the reorg; the node pushes the reorg.
				first := h.unans[:2]
				h.unans = h.unans[2:]
				for _, s := range first {
					res, _ := n.answer(s)
					h.apply(h.m.Answer(s.ID, res, h.now), nil)
				}
				n.chain, n.head = deep, 21
				pushLogs(h, only(logsOf(main, 10, 20), "0xaa"), true)
				pushLogs(h, only(logsOf(deep, 10, 21), "0xaa"), false)
			}},
		{name: "reorg inside history after it was delivered", chain: deep, head: 21,
			after: func(h *harness, n *node) {
				n.chain, n.head = deep, 21
				pushLogs(h, only(logsOf(main, 10, 20), "0xaa"), true)
				pushLogs(h, only(logsOf(deep, 10, 21), "0xaa"), false)
			}},
		{name: "connection lost while history is fetched: all of it again", cfg: Config{Blocks: 4}, chain: main, head: 30,
			during: func(h *harness, n *node) {
				h.m.Disconnected()
				h.unans = nil
				n.head = 30
				h.apply(h.m.Live(logsKey, h.now), nil)
				h.apply(h.m.Live(histKey, h.now), nil)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, head: 20, logs: append(append(logsOf(main, 1, 60), logsOf(forked, 20, 60)...), logsOf(deep, 10, 60)...)}
			cfg := tt.cfg
			if cfg.Blocks == 0 {
				cfg.Blocks = 128
			}
			h := newHarness(t, cfg, n)
			h.apply(h.m.Live(logsKey, h.now), nil)
			n.hook = func(s Send) ([]byte, bool, bool) { return nil, false, s.Method == "eth_getLogs" }
			h.apply(h.m.History(histKey, logsKey, 5, 0, h.now), nil)
			if len(h.unans) == 0 {
				t.Fatalf("no eth_getLogs asked")
			}
			if tt.during != nil {
				tt.during(h, n)
			}
			n.hook = nil
			h.answerHeld(n, nil)
			for range 4 {
				h.tick(h.m.cfg.RetryDelay)
			}
			if tt.after != nil {
				tt.after(h, n)
			}
			want := logStrings(only(logsOf(tt.chain, 5, tt.head), "0xaa"), false)
			if got := replayLogs(t, h, histKey); !slices.Equal(got, want) {
				t.Fatalf("delivered, replayed\n%v\nwant\n%v", got, want)
			}
			for _, g := range h.fullGaps {
				if g.Key == histKey {
					t.Fatalf("gap %+v", g)
				}
			}
			// Its history delivered, the key follows the chain as any
			// logs key (after a reorg, from below the replaced blocks).
			if c, ok := h.m.Covered(histKey); !ok || c < 5 || (tt.chain[20].hash == main[20].hash && c < tt.head-1) {
				t.Fatalf("covered %d %v, want at least %d", c, ok, tt.head-1)
			}
		})
	}
}

func pushLogs(h *harness, ls []lg, removed bool) {
	for _, l := range ls {
		h.push(logsKey, logJSON(l, removed))
		h.push(histKey, logJSON(l, removed))
	}
}

// TestHistoryChunksShrink: an eth_getLogs range the node refuses for its
// size is asked again in halves until the node takes it; every log of the
// range is delivered once, in order. Any other error counts as a failure.
func TestHistoryChunksShrink(t *testing.T) {
	main := chainOf(0, 0, 60)
	n := &node{chain: main, head: 40, logs: logsOf(main, 1, 60)}
	h := newHarness(t, Config{Blocks: 128, HistoryChunk: 16}, n)
	n.hook = func(s Send) ([]byte, bool, bool) { return nil, false, s.Method == "eth_getLogs" }
	h.apply(h.m.History(histKey, logsKey, 3, 0, h.now), nil)
	widest := uint64(0)
	asked := 0
	for len(h.unans) > 0 {
		s := h.unans[0]
		h.unans = h.unans[1:]
		from, to := getLogsRangeOf(t, s)
		asked++
		if to-from+1 > 3 {
			h.apply(h.m.AnswerError(s.ID, "query returned more than 10000 results", h.now), nil)
			continue
		}
		widest = max(widest, to-from+1)
		n.hook = nil
		res, _ := n.answer(s)
		n.hook = func(s Send) ([]byte, bool, bool) { return nil, false, s.Method == "eth_getLogs" }
		h.apply(h.m.Answer(s.ID, res, h.now), nil)
	}
	want := logStrings(only(logsOf(main, 3, 40), "0xaa"), false)
	if got := h.deliveredLogsTo(histKey); !slices.Equal(got, want) {
		t.Fatalf("delivered\n%v\nwant\n%v", got, want)
	}
	if widest == 0 || widest > 3 || asked <= 3 || len(h.gaps) != 0 {
		t.Fatalf("widest range answered %d, asked %d, gaps %v", widest, asked, h.gaps)
	}
	if !TooManyResults("exceed maximum block range: 10000") || TooManyResults("header not found") {
		t.Fatalf("TooManyResults misreads node errors")
	}
}

const headsHistKey = `["newHeads"]#history`

// TestHistoryHeads: a newHeads history key from block 5, with the node at
// head 20 (backfill_blocks 4: no floor applies to the history), gets
// heads 6..20 chained, then the live heads, none twice; pushed while the
// start block is read, a head is held and starts the backfill itself. A
// connection lost during the history ends with the same chain.
func TestHistoryHeads(t *testing.T) {
	main := chainOf(0, 0, 60)
	for _, tt := range []struct {
		name string
		run  func(h *harness, n *node)
	}{
		{name: "history then live", run: func(h *harness, n *node) {
			h.apply(h.m.HistoryHeads(headsHistKey, 5, 0, h.now), nil)
		}},
		{name: "head pushed while the start is read", run: func(h *harness, n *node) {
			n.hook = func(s Send) ([]byte, bool, bool) { return nil, false, true }
			h.apply(h.m.HistoryHeads(headsHistKey, 5, 0, h.now), nil)
			n.hook = nil
			n.head = 21
			h.push(headsHistKey, headJSON(main[21]))
			h.answerHeld(n, nil)
		}},
		{name: "connection lost during the history", run: func(h *harness, n *node) {
			asked := 0
			n.hook = func(s Send) ([]byte, bool, bool) {
				asked++
				return nil, false, asked > 6
			}
			h.apply(h.m.HistoryHeads(headsHistKey, 5, 0, h.now), nil)
			h.m.Disconnected()
			h.unans = nil
			n.hook = nil
			n.head = 22
			h.apply(h.m.Live(headsHistKey, h.now), nil)
			h.tick(2 * h.m.cfg.HeadWait)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, head: 20}
			h := newHarness(t, Config{Blocks: 4}, n)
			tt.run(h, n)
			for range 4 {
				h.tick(h.m.cfg.RetryDelay)
			}
			top := n.head
			for b := top + 1; b <= top+2; b++ {
				n.head = b
				h.push(headsHistKey, headJSON(main[b]))
			}
			got := h.delivered(headsHistKey, func(r []byte) (string, bool) {
				x, ok := parseHeader(r)
				return headString(x.num, x.hash), ok
			})
			if want := headsOf(main, 6, top+2); !slices.Equal(got, want) {
				t.Fatalf("delivered\n%v\nwant\n%v", got, want)
			}
			for _, g := range h.fullGaps {
				if g.Key == headsHistKey {
					t.Fatalf("gap %+v", g)
				}
			}
		})
	}
}

// TestHistoryToBlock: a history that ends at a block below the node's
// head (its toBlock) fetches that range only: no request names a block
// past it, and exactly its logs (heads) are delivered.
func TestHistoryToBlock(t *testing.T) {
	main := chainOf(0, 0, 60)
	t.Run("logs", func(t *testing.T) {
		n := &node{chain: main, head: 40, logs: logsOf(main, 1, 60)}
		h := newHarness(t, Config{Blocks: 128, HistoryChunk: 4}, n)
		h.apply(h.m.History(histKey, logsKey, 5, 17, h.now), nil)
		for _, s := range n.seen {
			if s.Method != "eth_getLogs" {
				t.Fatalf("asked %s %s: the range's end is known", s.Method, s.Params)
			}
			if _, to := getLogsRangeOf(t, s); to > 17 {
				t.Fatalf("asked %s, past block 17", s.Params)
			}
		}
		if want := logStrings(only(logsOf(main, 5, 17), "0xaa"), false); !slices.Equal(h.deliveredLogsTo(histKey), want) {
			t.Fatalf("delivered\n%v\nwant\n%v", h.deliveredLogsTo(histKey), want)
		}
		if c, ok := h.m.Covered(histKey); !ok || c != 17 {
			t.Fatalf("covered %d %v, want 17", c, ok)
		}
	})
	t.Run("heads", func(t *testing.T) {
		n := &node{chain: main, head: 40}
		h := newHarness(t, Config{Blocks: 4}, n)
		h.apply(h.m.HistoryHeads(headsHistKey, 5, 12, h.now), nil)
		for _, s := range n.seen {
			var p []json.RawMessage
			_ = json.Unmarshal(s.Params, &p)
			num, ok := parseQuantityJSON(p[0])
			if s.Method != "eth_getBlockByNumber" || !ok || num > 12 {
				t.Fatalf("asked %s %s: the range ends at block 12", s.Method, s.Params)
			}
		}
		got := h.delivered(headsHistKey, func(r []byte) (string, bool) {
			x, ok := parseHeader(r)
			return headString(x.num, x.hash), ok
		})
		if want := headsOf(main, 6, 12); !slices.Equal(got, want) {
			t.Fatalf("delivered\n%v\nwant\n%v", got, want)
		}
	})
}

// TestSendingRestartsTheDeadline covers Sending: a request the caller held
// back times out RequestTimeout after it was sent, not after the machine
// asked for it; one the machine no longer waits for is refused.
func TestSendingRestartsTheDeadline(t *testing.T) {
	m := New(Config{Blocks: 8})
	t0 := time.Unix(1000, 0)
	eff := m.History(histKey, logsKey, 1, 100, t0)
	if len(eff.Sends) != 1 {
		t.Fatalf("sends %+v, want one eth_getLogs", eff.Sends)
	}
	id := eff.Sends[0].ID
	late := t0.Add(DefaultRequestTimeout - time.Second)
	if !m.Sending(id, late) {
		t.Fatal("Sending refused a request the machine waits for")
	}
	if got := m.Tick(t0.Add(DefaultRequestTimeout)); len(got.Sends) != 0 || len(got.Gaps) != 0 {
		t.Fatalf("timed out from when it was asked for: %+v", got)
	}
	// Past the deadline Sending set: a failed attempt, asked again
	// RetryDelay later.
	if got := m.Tick(late.Add(DefaultRequestTimeout)); len(got.Sends) != 0 {
		t.Fatalf("sends %+v before RetryDelay", got.Sends)
	}
	got := m.Tick(late.Add(DefaultRequestTimeout + DefaultRetryDelay))
	if len(got.Sends) != 1 || got.Sends[0].ID == id {
		t.Fatalf("sends %+v, want the request again under a new id", got.Sends)
	}
	if m.Sending(id, late) {
		t.Fatal("Sending accepted a request that timed out")
	}
	m.Forget(histKey)
	if m.Sending(got.Sends[0].ID, late) {
		t.Fatal("Sending accepted a request of a forgotten key")
	}
}
