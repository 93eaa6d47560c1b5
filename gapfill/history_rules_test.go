package gapfill

import (
	"slices"
	"testing"
)

// TestExpectRules: the rules of Expect (start.go), each row a sequence of
// events on a fresh machine with the node at head 20, and what must go
// out: the eth_blockNumber requests the machine sends (where a logs key
// starts) and the logs delivered.
func TestExpectRules(t *testing.T) {
	main := chainOf(0, 0, 60)
	countBaseline := func(n *node) int {
		ids := map[uint64]bool{} // a held request is seen again when answered
		for _, s := range n.seen {
			if s.Method == "eth_blockNumber" {
				ids[s.ID] = true
			}
		}
		return len(ids)
	}
	for _, tt := range []struct {
		name     string
		run      func(h *harness, n *node)
		baseline int      // eth_blockNumber requests sent
		want     []string // logs delivered to logsKey
		gaps     []Gap
	}{
		{
			// Asked with the eth_subscribe, answered before Live: Live
			// asks nothing more, and the pushes after it go through.
			name: "a logs key asks where it starts ahead of Live",
			run: func(h *harness, n *node) {
				h.apply(h.m.Expect(logsKey, h.now), nil)
				h.apply(h.m.Live(logsKey, h.now), nil)
				pushLogs1(h, only(logsOf(main, 21, 21), "0xaa"))
			},
			baseline: 1,
			want:     logStrings(only(logsOf(main, 21, 21), "0xaa"), false),
		},
		{
			// Live while the baseline is in flight: it is not asked again.
			name: "Live while the baseline is in flight asks no second one",
			run: func(h *harness, n *node) {
				n.hook = func(s Send) ([]byte, bool, bool) { return nil, false, s.Method == "eth_blockNumber" }
				h.apply(h.m.Expect(logsKey, h.now), nil)
				h.apply(h.m.Live(logsKey, h.now), nil)
				n.hook = nil
				h.answerHeld(n, nil)
			},
			baseline: 1,
		},
		{
			// The connection lost before the baseline was answered: the
			// next Live asks for it again.
			name: "baseline lost with the connection is asked again at Live",
			run: func(h *harness, n *node) {
				n.hook = func(s Send) ([]byte, bool, bool) { return nil, false, s.Method == "eth_blockNumber" }
				h.apply(h.m.Expect(logsKey, h.now), nil)
				h.m.Disconnected()
				h.unans = nil
				n.hook = nil
				h.apply(h.m.Live(logsKey, h.now), nil)
			},
			baseline: 2,
		},
		{
			// The baseline known, the connection lost right after Live:
			// the logs mined during the outage are backfilled.
			name: "outage right after Live is backfilled from the baseline",
			run: func(h *harness, n *node) {
				h.apply(h.m.Expect(logsKey, h.now), nil)
				h.apply(h.m.Live(logsKey, h.now), nil)
				h.m.Disconnected()
				n.head = 24
				h.apply(h.m.Live(logsKey, h.now), nil)
			},
			baseline: 1,
			want:     logStrings(only(logsOf(main, 21, 24), "0xaa"), false),
		},
		{
			name: "a second Expect of a known key sends nothing",
			run: func(h *harness, n *node) {
				h.apply(h.m.Expect(logsKey, h.now), nil)
				h.apply(h.m.Expect(logsKey, h.now), nil)
			},
			baseline: 1,
		},
		{
			name: "Expect of a newHeads key sends nothing",
			run: func(h *harness, n *node) {
				h.apply(h.m.Expect(headsKey, h.now), nil)
			},
		},
		{
			name: "Expect with backfill off sends nothing",
			run: func(h *harness, n *node) {
				h.m = New(Config{})
				h.apply(h.m.Expect(logsKey, h.now), nil)
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, head: 20, logs: logsOf(main, 1, 60)}
			h := newHarness(t, Config{Blocks: 128}, n)
			tt.run(h, n)
			if got := countBaseline(n); got != tt.baseline {
				t.Errorf("sent %d eth_blockNumber, want %d", got, tt.baseline)
			}
			if got := h.deliveredLogsTo(logsKey); !slices.Equal(got, tt.want) {
				t.Errorf("delivered\n%v\nwant\n%v", got, tt.want)
			}
			if !slices.Equal(h.gaps, tt.gaps) {
				t.Errorf("gaps %v, want %v", h.gaps, tt.gaps)
			}
		})
	}
}

// pushLogs1 pushes ls to logsKey only.
func pushLogs1(h *harness, ls []lg) {
	for _, l := range ls {
		h.push(logsKey, logJSON(l, false))
	}
}

// TestHistoryHeadsAnchorRules: how a newHeads history key (from block 5,
// node at head 20) deals with the read of its start block failing. A
// start the node answers null or with another block is asked again and
// the history is delivered as usual; a start that fails Attempts times
// ends the history with a gap "failed", and the heads held meanwhile go
// out as they came.
func TestHistoryHeadsAnchorRules(t *testing.T) {
	main := chainOf(0, 0, 60)
	headStr := func(r []byte) (string, bool) {
		x, ok := parseHeader(r)
		return headString(x.num, x.hash), ok
	}
	for _, tt := range []struct {
		name string
		// answer answers the n-th (from 1) read of block 5.
		answer func(n int) []byte
		want   []string
		gaps   []Gap
	}{
		{name: "start answered null once, then read", answer: func(n int) []byte {
			if n == 1 {
				return []byte("null")
			}
			return blockJSON(main[5])
		}, want: headsOf(main, 6, 21)},
		{name: "start answered with another block, then read", answer: func(n int) []byte {
			if n == 1 {
				return blockJSON(main[6])
			}
			return blockJSON(main[5])
		}, want: headsOf(main, 6, 21)},
		{name: "start failing every attempt: a gap, then the held head", answer: func(int) []byte {
			return nil
		}, want: headsOf(main, 21, 21), gaps: []Gap{{Kind: "newHeads", Reason: "failed"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, head: 20}
			reads := 0
			n.hook = func(s Send) ([]byte, bool, bool) {
				if s.Method == "eth_getBlockByNumber" && string(s.Params) == `["0x5",false]` {
					reads++
					return tt.answer(reads), true, false
				}
				return nil, false, false
			}
			h := newHarness(t, Config{Blocks: 4}, n)
			h.apply(h.m.HistoryHeads(headsHistKey, 5, 0, h.now), nil)
			if _, ok := h.m.Covered(headsHistKey); ok {
				t.Fatalf("covered reported while the start is still read")
			}
			// The node mines block 21 while the start is read (again).
			n.head = 21
			h.push(headsHistKey, headJSON(main[21]))
			for range 2 * h.m.cfg.Attempts {
				h.tick(h.m.cfg.RetryDelay)
			}
			if got := h.delivered(headsHistKey, headStr); !slices.Equal(got, tt.want) {
				t.Fatalf("delivered\n%v\nwant\n%v", got, tt.want)
			}
			if !slices.Equal(h.gaps, tt.gaps) {
				t.Fatalf("gaps %v, want %v", h.gaps, tt.gaps)
			}
			// Done, the key reports the last head it was delivered.
			if c, ok := h.m.Covered(headsHistKey); !ok || c != 21 {
				t.Fatalf("covered %d %v, want 21", c, ok)
			}
		})
	}
}

// TestHistoryLogsRules: rules of a logs history key (from block 5, node at
// head 20, HistoryChunk 4) beyond the seam TestHistory checks.
func TestHistoryLogsRules(t *testing.T) {
	main := chainOf(0, 0, 60)
	for _, tt := range []struct {
		name string
		// errAnswer is the node's error for an eth_getLogs from..to
		// ("": answered).
		errAnswer func(from, to uint64) string
		want      []string
		gaps      []Gap
		// from, to are the blocks the failed gap names.
		from, to uint64
	}{
		{
			// A range the node refuses for another reason than its size
			// is not halved: it fails, is retried, and past Attempts its
			// blocks are stated as a gap; the rest is delivered.
			name: "other errors are failures, not halvings",
			errAnswer: func(from, to uint64) string {
				if from == 9 {
					return "header not found"
				}
				return ""
			},
			want: logStrings(slices.Concat(only(logsOf(main, 5, 8), "0xaa"), only(logsOf(main, 13, 20), "0xaa")), false),
			gaps: []Gap{{Kind: "logs", Reason: "failed"}},
			from: 9, to: 12,
		},
		{
			// A one-block range cannot be halved: "too many" for it is a
			// failure.
			name: "a one-block range refused for its size fails",
			errAnswer: func(from, to uint64) string {
				if from <= 10 && 10 <= to {
					return "query returned more than 10000 results"
				}
				return ""
			},
			want: logStrings(slices.Concat(only(logsOf(main, 5, 9), "0xaa"), only(logsOf(main, 11, 20), "0xaa")), false),
			gaps: []Gap{{Kind: "logs", Reason: "failed"}},
			from: 10, to: 10,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, head: 20, logs: logsOf(main, 1, 60)}
			n.hook = func(s Send) ([]byte, bool, bool) { return nil, false, s.Method == "eth_getLogs" }
			h := newHarness(t, Config{Blocks: 128, HistoryChunk: 4}, n)
			h.apply(h.m.History(histKey, logsKey, 5, 0, h.now), nil)
			if _, ok := h.m.Covered(histKey); ok {
				t.Fatalf("covered reported before the history was delivered")
			}
			// A second History of the key changes nothing.
			before := len(h.unans)
			h.apply(h.m.History(histKey, logsKey, 1, 0, h.now), nil)
			if len(h.unans) != before || len(h.pending) != 0 {
				t.Fatalf("a second History sent requests")
			}
			for range 20 {
				for len(h.unans) > 0 {
					s := h.unans[0]
					h.unans = h.unans[1:]
					if s.Method == "eth_getLogs" {
						if msg := tt.errAnswer(getLogsRangeOf(t, s)); msg != "" {
							h.apply(h.m.AnswerError(s.ID, msg, h.now), nil)
							continue
						}
					}
					hook := n.hook
					n.hook = nil
					res, _ := n.answer(s)
					n.hook = hook
					h.apply(h.m.Answer(s.ID, res, h.now), nil)
				}
				h.tick(h.m.cfg.RetryDelay)
			}
			if got := h.deliveredLogsTo(histKey); !slices.Equal(got, tt.want) {
				t.Fatalf("delivered\n%v\nwant\n%v", got, tt.want)
			}
			for _, g := range h.fullGaps {
				if g.Key != histKey {
					t.Fatalf("gap %+v stated for another key", g)
				}
				if g.From != tt.from || g.To != tt.to {
					t.Fatalf("gap %+v names blocks %d..%d, want %d..%d", g, g.From, g.To, tt.from, tt.to)
				}
			}
			if !slices.Equal(h.gaps, tt.gaps) {
				t.Fatalf("gaps %v, want %v", h.gaps, tt.gaps)
			}
		})
	}
}

// TestHistoryStartRules: a history key starts once: History and
// HistoryHeads of a key the machine knows, or with backfill off, send
// nothing; and the answers to a history key's requests that arrive after
// it was forgotten (its subscriber left) are ignored.
func TestHistoryStartRules(t *testing.T) {
	main := chainOf(0, 0, 60)
	for _, tt := range []struct {
		name  string
		cfg   Config
		start func(h *harness) Effects // the call under test
		first func(h *harness)         // before it (nil: none)
		sends int                      // requests start must send
	}{
		{name: "logs history with backfill off", start: func(h *harness) Effects {
			return h.m.History(histKey, logsKey, 5, 0, h.now)
		}},
		{name: "heads history with backfill off", start: func(h *harness) Effects {
			return h.m.HistoryHeads(headsHistKey, 5, 0, h.now)
		}},
		{name: "heads history of a known key", cfg: Config{Blocks: 4},
			first: func(h *harness) { h.apply(h.m.HistoryHeads(headsHistKey, 5, 0, h.now), nil) },
			start: func(h *harness) Effects { return h.m.HistoryHeads(headsHistKey, 3, 0, h.now) }},
		{name: "heads history of a new key", cfg: Config{Blocks: 4}, sends: 1,
			start: func(h *harness) Effects { return h.m.HistoryHeads(headsHistKey, 3, 0, h.now) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, head: 20, logs: logsOf(main, 1, 60)}
			h := newHarness(t, tt.cfg, n)
			if tt.first != nil {
				tt.first(h)
			}
			e := tt.start(h)
			if len(e.Sends) != tt.sends || len(e.Deliveries) != 0 || len(e.Gaps) != 0 {
				t.Fatalf("effects %+v, want %d sends and nothing else", e, tt.sends)
			}
		})
	}

	t.Run("answers after Forget are ignored", func(t *testing.T) {
		n := &node{chain: main, head: 20, logs: logsOf(main, 1, 60)}
		n.hook = func(s Send) ([]byte, bool, bool) { return nil, false, true }
		h := newHarness(t, Config{Blocks: 128, HistoryChunk: 4}, n)
		h.apply(h.m.History(histKey, logsKey, 5, 0, h.now), nil)
		if len(h.unans) == 0 {
			t.Fatalf("History sent nothing")
		}
		h.m.Forget(histKey)
		n.hook = nil
		for _, s := range h.unans {
			res, _ := n.answer(s)
			if e := h.m.Answer(s.ID, res, h.now); len(e.Sends)+len(e.Deliveries)+len(e.Gaps) != 0 {
				t.Fatalf("answer to a forgotten key's request had effects %+v", e)
			}
			if e := h.m.AnswerError(s.ID, "query returned more than 10000 results", h.now); len(e.Sends)+len(e.Deliveries)+len(e.Gaps) != 0 {
				t.Fatalf("error answer to a forgotten key's request had effects %+v", e)
			}
		}
		h.unans = nil
		seen := len(n.seen)
		h.tick(h.m.cfg.RequestTimeout + h.m.cfg.RetryDelay)
		if len(h.out) != 0 || len(h.gaps) != 0 || len(n.seen) != seen {
			t.Fatalf("after Forget: delivered %d, gaps %v, sent %d", len(h.out), h.gaps, len(n.seen)-seen)
		}
		if _, ok := h.m.Covered(histKey); ok {
			t.Fatalf("a forgotten key reports a covered block")
		}
	})
}
