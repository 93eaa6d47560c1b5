package gapfill

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// This file holds the rules the other tables left out: what the caller
// may ask the machine between events (Running, Jobs, Passes, Forget),
// what it makes of payloads it cannot read, and the bounds on what it
// holds and remembers.

// TestMachineQueries: Running and Jobs see a job from its start to its
// end; Passes says which keys the machine leaves alone; Forget drops a
// key with its job, and the answers to its requests change nothing.
func TestMachineQueries(t *testing.T) {
	main := chainOf(0, 0, 40)
	const pending = `["newPendingTransactions"]`
	tests := []struct {
		name string
		// forget, when set, forgets the heads key while its job runs
		// (answered after); otherwise the job's requests are answered.
		forget      bool
		wantRunning bool // after the answers
		wantOut     []string
	}{
		{name: "a job runs until its answers are in", wantOut: headsOf(main, 10, 14)},
		{name: "a forgotten key's job ends at once; its answers are ignored", forget: true, wantOut: headsOf(main, 10, 10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, head: 20, hook: func(Send) ([]byte, bool, bool) { return nil, false, true }}
			h := newHarness(t, Config{Blocks: 128}, n)
			h.apply(h.m.Live(headsKey, h.now), nil)
			h.apply(h.m.Live(pending, h.now), nil)
			if h.m.Running(headsKey) || h.m.Jobs() != 0 {
				t.Fatalf("before any push: Running %v, Jobs %d", h.m.Running(headsKey), h.m.Jobs())
			}
			for key, want := range map[string]bool{headsKey: false, pending: true, `["unknownKey"]`: true} {
				if got := h.m.Passes(key); got != want {
					t.Errorf("Passes(%s) = %v, want %v", key, got, want)
				}
			}
			h.push(headsKey, headJSON(main[10]))
			h.push(headsKey, headJSON(main[14])) // a jump: a job for 11..13
			if !h.m.Running(headsKey) || h.m.Running(pending) || h.m.Jobs() != 1 {
				t.Fatalf("during the job: Running %v/%v, Jobs %d", h.m.Running(headsKey), h.m.Running(pending), h.m.Jobs())
			}
			if tt.forget {
				h.m.Forget(headsKey)
				if h.m.Running(headsKey) || h.m.Jobs() != 0 || !h.m.Passes(headsKey) || len(h.m.reqs) != 0 {
					t.Fatalf("after Forget: Running %v, Jobs %d, Passes %v, %d requests", h.m.Running(headsKey), h.m.Jobs(), h.m.Passes(headsKey), len(h.m.reqs))
				}
			}
			h.answerHeld(&node{chain: main, head: 20}, nil)
			if h.m.Running(headsKey) != tt.wantRunning || h.m.Jobs() != 0 {
				t.Errorf("after the answers: Running %v, Jobs %d", h.m.Running(headsKey), h.m.Jobs())
			}
			if got := h.deliveredHeads(); !slices.Equal(got, tt.wantOut) {
				t.Errorf("delivered %v, want %v", got, tt.wantOut)
			}
		})
	}
	// Backfill off: every key passes.
	m := New(Config{Blocks: -1})
	m.Live(headsKey, time.Unix(1_700_000_000, 0))
	if m.Enabled() || !m.Passes(headsKey) {
		t.Errorf("Blocks -1: Enabled %v, Passes %v", m.Enabled(), m.Passes(headsKey))
	}
}

// TestPushedHead reads a newHeads push's head as the machine does (core's
// head view relies on it): anything that is not a head is refused.
func TestPushedHead(t *testing.T) {
	b := chainOf(0, 0, 20)[17]
	tests := []struct {
		name   string
		params string
		ok     bool
	}{
		{"a head", string(pushParams(headJSON(b))), true},
		{"hashes in upper case are read in lower case", string(pushParams([]byte(`{"number":"0x11","hash":"0X` + b.hash[2:] + `","parentHash":"` + b.parent + `"}`))), true},
		{"no result", `{"subscription":"0xabc"}`, false},
		{"not an object", `[1]`, false},
		{"a result that is no head", string(pushParams([]byte(`{"number":"0x11"}`))), false},
		{"a number that is no quantity", string(pushParams([]byte(`{"number":"17","hash":"` + b.hash + `","parentHash":"` + b.parent + `"}`))), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			num, hash, parent, ok := PushedHead([]byte(tt.params))
			if ok != tt.ok {
				t.Fatalf("ok %v, want %v", ok, tt.ok)
			}
			if ok && (num != 17 || hash != b.hash || parent != b.parent) {
				t.Errorf("got %d %s %s, want 17 %s %s", num, hash, parent, b.hash, b.parent)
			}
		})
	}
}

// TestPayloadsNotRead: what the machine cannot read goes out as it came
// (a push) or stands for nothing (a key, a filter, a block, a log).
func TestPayloadsNotRead(t *testing.T) {
	t.Run("asRemoved", func(t *testing.T) {
		for _, tt := range []struct{ name, in, want string }{
			{"removed false is set true in place", `{"a":1,"removed":false}`, `{"a":1,"removed":true}`},
			{"a log without the member gets it", `{"logIndex":"0x1"}`, `{"logIndex":"0x1","removed":true}`},
			{"spacing as the node wrote it", `{"removed" : false}`, `{"removed":true}`},
			{"not an object: as it came", `[1,2]`, `[1,2]`},
			{"null: as it came", `null`, `null`},
		} {
			if got := string(asRemoved([]byte(tt.in))); got != tt.want {
				t.Errorf("%s: asRemoved(%s) = %s, want %s", tt.name, tt.in, got, tt.want)
			}
		}
	})
	t.Run("subscriptionName", func(t *testing.T) {
		for _, tt := range []struct{ key, want string }{
			{`not json`, ""},
			{`[]`, ""},
			{`[1]`, ""},
			{`{"logs":1}`, ""},
			{`["logs"]`, "logs"},
			{`["newHeads"]`, "newHeads"},
		} {
			if got, _ := subscriptionName(tt.key); got != tt.want {
				t.Errorf("subscriptionName(%s) = %q, want %q", tt.key, got, tt.want)
			}
		}
	})
	t.Run("logsFilter", func(t *testing.T) {
		for _, tt := range []struct{ raw, want string }{
			{`"0xaa"`, `{}`},
			{`{"address":"0xaa",`, `{}`},            // cut short: an empty filter
			{`{"address":"0xaa","topics":[}`, `{}`}, // a bad member: an empty filter
			{`{"Address":"0xaa","FROMBLOCK":"0x1"}`, `{"address":"0xaa"}`},
		} {
			got, _ := json.Marshal(logsFilter(json.RawMessage(tt.raw)))
			if string(got) != tt.want {
				t.Errorf("logsFilter(%s) = %s, want %s", tt.raw, got, tt.want)
			}
		}
	})
	t.Run("HeaderFromBlock", func(t *testing.T) {
		for _, in := range []string{`null`, `[]`, `"0x1"`, `{"number":"0x1","hash":"0x2"}`} {
			if out, ok := HeaderFromBlock([]byte(in)); ok {
				t.Errorf("HeaderFromBlock(%s) = %s, want refused", in, out)
			}
		}
	})
	t.Run("parseLog", func(t *testing.T) {
		h := hashOf(0, 5)
		for _, in := range []string{
			`{"blockNumber":"0x5","blockHash":"` + h + `","logIndex":"one"}`,
			`{"blockNumber":"5","blockHash":"` + h + `","logIndex":"0x0"}`,
			`{"blockNumber":"0x5","blockHash":"0x5","logIndex":"0x0"}`,
		} {
			if _, ok := parseLog([]byte(in)); ok {
				t.Errorf("parseLog(%s) read a log", in)
			}
		}
	})
	t.Run("a push without a result goes out as it came", func(t *testing.T) {
		main := chainOf(0, 0, 20)
		for _, key := range []string{headsKey, logsKey} {
			n := &node{chain: main, head: 20}
			h := newHarness(t, Config{Blocks: 128}, n)
			h.apply(h.m.Live(key, h.now), nil)
			params := []byte(`{"subscription":"0xabc"}`)
			e := h.m.Push(key, params, h.now)
			if len(e.Deliveries) != 1 || !e.Deliveries[0].Live || len(e.Sends) != 0 || h.m.Running(key) {
				t.Errorf("%s: %+v, running %v", key, e, h.m.Running(key))
			}
		}
	})
}

// TestHeadsSearchFails: a gap longer than Blocks looks for the fork point
// below the floor (the node's block at the last delivered head, by
// number); when that request fails, stays null, or answers another
// block, where the gap starts stays unknown: the heads from the floor up
// still go out, and the gap is stated from an unknown start (From 0) to
// below the floor.
func TestHeadsSearchFails(t *testing.T) {
	main := chainOf(0, 0, 40)
	const search = `["0xa",false]` // the block at the last delivered head, 10
	tests := []struct {
		name   string
		cfg    Config
		answer []byte // the node's answer to the search; nil: an error
	}{
		{name: "an error past Attempts", cfg: Config{Blocks: 4, Attempts: 1}},
		{name: "null past NullRetries", cfg: Config{Blocks: 4, NullRetries: 1}, answer: []byte("null")},
		{name: "another block than the one asked", cfg: Config{Blocks: 4, Attempts: 1}, answer: blockJSON(main[9])},
		{name: "no block at all", cfg: Config{Blocks: 4, Attempts: 1}, answer: []byte(`{"number":"0xa"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, head: 30, hook: func(s Send) ([]byte, bool, bool) {
				if s.Method == "eth_getBlockByNumber" && string(s.Params) == search {
					return tt.answer, true, false
				}
				return nil, false, false
			}}
			h := newHarness(t, tt.cfg, n)
			h.apply(h.m.Live(headsKey, h.now), nil)
			for i := uint64(1); i <= 10; i++ {
				h.push(headsKey, headJSON(main[i]))
			}
			h.out = nil
			h.push(headsKey, headJSON(main[30]))
			for range 4 {
				h.tick(h.m.cfg.RetryDelay)
			}
			if got := h.deliveredHeads(); !slices.Equal(got, headsOf(main, 26, 30)) {
				t.Errorf("delivered %v, want %v", got, headsOf(main, 26, 30))
			}
			want := []Gap{{Kind: "newHeads", Reason: "too_long", Key: headsKey, From: 0, To: 25}}
			if !slices.Equal(h.fullGaps, want) {
				t.Errorf("gaps %+v, want %+v", h.fullGaps, want)
			}
			if h.m.Running(headsKey) {
				t.Errorf("the job still runs")
			}
		})
	}
}

// TestHeldPastMaxHeld: a job that holds more than MaxHeld pushes gives up:
// what it fetched goes out in order, then what it held, and the gap is
// counted too_many_held, for heads and for logs.
func TestHeldPastMaxHeld(t *testing.T) {
	main := chainOf(0, 0, 40)
	t.Run("heads", func(t *testing.T) {
		n := &node{chain: main, head: 20, hook: func(Send) ([]byte, bool, bool) { return nil, false, true }}
		h := newHarness(t, Config{Blocks: 128, MaxHeld: 2}, n)
		h.apply(h.m.Live(headsKey, h.now), nil)
		h.push(headsKey, headJSON(main[10]))
		h.push(headsKey, headJSON(main[14])) // a job for 11..13, never answered
		for i := uint64(15); i <= 17; i++ {
			h.push(headsKey, headJSON(main[i])) // held; the third is one too many
		}
		want := append(headsOf(main, 10, 10), headsOf(main, 14, 17)...)
		if got := h.deliveredHeads(); !slices.Equal(got, want) {
			t.Errorf("delivered %v, want %v", got, want)
		}
		if !slices.Equal(h.gaps, []Gap{{Kind: "newHeads", Reason: "too_many_held"}}) || h.m.Running(headsKey) {
			t.Errorf("gaps %v, running %v", h.gaps, h.m.Running(headsKey))
		}
	})
	t.Run("logs", func(t *testing.T) {
		n := &node{chain: main, logs: logsOf(main, 1, 40)}
		h, _ := heldLogsJob(t, n, main, 10)
		fresh := only(logsOf(main, 11, 12), "0xaa")
		for _, l := range fresh {
			h.push(logsKey, logJSON(l, false)) // held
		}
		if len(h.out) != 0 || len(h.gaps) != 0 {
			t.Fatalf("before MaxHeld: delivered %v, gaps %v", h.deliveredLogs(), h.gaps)
		}
		h.m.cfg.MaxHeld = len(fresh) - 1
		more := only(logsOf(main, 13, 13), "0xaa")
		h.push(logsKey, logJSON(more[0], false))
		want := logStrings(append(fresh, more[0]), false)
		if got := h.deliveredLogs(); !slices.Equal(got, want) {
			t.Errorf("delivered %v, want %v", got, want)
		}
		if !slices.Equal(h.gaps, []Gap{{Kind: "logs", Reason: "too_many_held"}}) || h.m.Running(logsKey) {
			t.Errorf("gaps %v, running %v", h.gaps, h.m.Running(logsKey))
		}
	})
}

// TestLogsLiveAgainWithoutBaseline: a logs key live again before the node
// told it where it started (its eth_blockNumber never answered) has
// nothing to backfill from: the gap is counted unavailable and it asks
// again.
func TestLogsLiveAgainWithoutBaseline(t *testing.T) {
	n := &node{chain: chainOf(0, 0, 20), head: 10, hook: func(Send) ([]byte, bool, bool) { return nil, false, true }}
	h := newHarness(t, Config{Blocks: 128}, n)
	h.apply(h.m.Live(logsKey, h.now), nil)
	h.m.Disconnected()
	h.apply(h.m.Live(logsKey, h.now), nil)
	if !slices.Equal(h.gaps, []Gap{{Kind: "logs", Reason: "unavailable"}}) {
		t.Errorf("gaps %v", h.gaps)
	}
	if len(n.seen) != 2 || n.seen[0].Method != "eth_blockNumber" || n.seen[1].Method != "eth_blockNumber" || h.m.Running(logsKey) {
		t.Errorf("sent %v, running %v", n.seen, h.m.Running(logsKey))
	}
}

// TestHeadsLatestUnreadable: the node's head, asked after HeadWait, that
// is no block changes nothing: no job, nothing delivered, and the next
// push carries on under the usual rules.
func TestHeadsLatestUnreadable(t *testing.T) {
	main := chainOf(0, 0, 40)
	for _, answer := range []string{`{"number":"0xf"}`, `[]`} {
		n := &node{chain: main, head: 15, hook: func(s Send) ([]byte, bool, bool) {
			if string(s.Params) == `["latest",false]` {
				return []byte(answer), true, false
			}
			return nil, false, false
		}}
		h := newHarness(t, Config{Blocks: 128}, n)
		h.apply(h.m.Live(headsKey, h.now), nil)
		h.push(headsKey, headJSON(main[10]))
		h.m.Disconnected()
		h.apply(h.m.Live(headsKey, h.now), nil)
		h.out = nil
		h.tick(2 * DefaultHeadWait)
		if len(n.seen) != 1 || len(h.out) != 0 || h.m.Running(headsKey) {
			t.Fatalf("%s: sent %v, delivered %v, running %v", answer, n.seen, h.deliveredHeads(), h.m.Running(headsKey))
		}
		h.push(headsKey, headJSON(main[16]))
		if got := h.deliveredHeads(); !slices.Equal(got, headsOf(main, 11, 16)) {
			t.Errorf("%s: then delivered %v", answer, got)
		}
	}
}

// TestLogsNullRange: a null answer to eth_getLogs is an error (only blocks
// can be not there yet): past Attempts that range stays missing, counted
// failed, and the rest is delivered.
func TestLogsNullRange(t *testing.T) {
	main := chainOf(0, 0, 60)
	n := &node{chain: main, head: 0, logs: logsOf(main, 1, 60)}
	h := lostAfterLogs(t, Config{Blocks: 128, Attempts: 1, LogsChunk: 2}, n, 10)
	n.head = 16
	n.hook = func(s Send) ([]byte, bool, bool) {
		if s.Method == "eth_getLogs" && string(s.Params) == `[{"address":"0xaa","fromBlock":"0xc","toBlock":"0xd"}]` {
			return []byte("null"), true, false
		}
		return nil, false, false
	}
	h.out = nil
	h.apply(h.m.Live(logsKey, h.now), nil)
	for range 4 {
		h.tick(h.m.cfg.RetryDelay)
	}
	want := append(logStrings(only(logsOf(main, 11, 11), "0xaa"), false), logStrings(only(logsOf(main, 14, 16), "0xaa"), false)...)
	if got := h.deliveredLogs(); !slices.Equal(got, want) {
		t.Errorf("delivered\n%v\nwant\n%v", got, want)
	}
	if !slices.Equal(h.gaps, []Gap{{Kind: "logs", Reason: "failed"}}) {
		t.Errorf("gaps %v", h.gaps)
	}
}

// TestMemoryBounded: what the machine remembers of a chain it follows for
// long is bounded by Blocks (and UnknownForkDepth below them), not by how
// long it runs: the delivered heads' hashes per key, and the headers it
// has seen.
func TestMemoryBounded(t *testing.T) {
	const last = 400
	main := chainOf(0, 0, last)
	h := newHarness(t, Config{Blocks: 4}, &node{chain: main, head: last})
	h.apply(h.m.Live(headsKey, h.now), nil)
	for i := uint64(1); i <= last; i++ {
		h.push(headsKey, headJSON(main[i]))
	}
	if got := h.deliveredHeads(); !slices.Equal(got, headsOf(main, 1, last)) {
		t.Fatalf("delivered %d heads, want %d in order", len(got), last)
	}
	mem := h.m.memory()
	k := h.m.keys[headsKey]
	if uint64(len(k.hashes)) > mem+1 {
		t.Errorf("%d delivered hashes kept, want at most %d", len(k.hashes), mem+1)
	}
	for n := range k.hashes {
		if n+mem < last {
			t.Errorf("hash of head %d kept, more than %d below the last", n, mem)
		}
	}
	if uint64(len(h.m.headers)) > 4*(mem+2) {
		t.Errorf("%d headers kept, want at most %d", len(h.m.headers), 4*(mem+2))
	}
	if _, ok := h.m.headers[main[last].hash]; !ok {
		t.Errorf("the last head's header was not kept")
	}
}

// TestLogsAnswersUnreadable: an answer a logs job cannot use counts as a
// failed request (past Attempts: the job gives up on what it needed it
// for, counted failed); in an eth_getLogs answer, an element that is no
// log, or one the node marks removed, is skipped.
func TestLogsAnswersUnreadable(t *testing.T) {
	main := chainOf(0, 0, 60)
	missed := func(from, to uint64) []string { return logStrings(only(logsOf(main, from, to), "0xaa"), false) }
	removed := logJSON(only(logsOf(main, 12, 12), "0xaa")[0], true)
	tests := []struct {
		name    string
		params  string // the request answered
		answer  string
		want    []string
		wantGap []Gap
	}{
		{name: "the node's head is no block", params: `["latest",false]`, answer: `{"number":"0x10"}`,
			wantGap: []Gap{{Kind: "logs", Reason: "failed"}}},
		{name: "a check answers another block", params: `["0xa",false]`, answer: string(blockJSON(main[9])),
			wantGap: []Gap{{Kind: "logs", Reason: "failed"}}},
		{name: "eth_getLogs answers no array", params: `[{"address":"0xaa","fromBlock":"0xc","toBlock":"0xd"}]`, answer: `{"logs":[]}`,
			want: append(missed(11, 11), missed(14, 16)...), wantGap: []Gap{{Kind: "logs", Reason: "failed"}}},
		{name: "eth_getLogs elements that are no log or removed are skipped", params: `[{"address":"0xaa","fromBlock":"0xc","toBlock":"0xd"}]`,
			answer: `[{"address":"0xaa"},` + string(removed) + `]`,
			want:   append(missed(11, 11), missed(14, 16)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: main, head: 0, logs: logsOf(main, 1, 60)}
			h := lostAfterLogs(t, Config{Blocks: 128, Attempts: 1, LogsChunk: 2}, n, 10)
			n.head = 16
			asked := false
			n.hook = func(s Send) ([]byte, bool, bool) {
				if string(s.Params) == tt.params {
					asked = true
					return []byte(tt.answer), true, false
				}
				return nil, false, false
			}
			h.out = nil
			h.apply(h.m.Live(logsKey, h.now), nil)
			for range 4 {
				h.tick(h.m.cfg.RetryDelay)
			}
			if !asked {
				t.Fatalf("the job never sent %s; sent %v", tt.params, n.seen)
			}
			if got := h.deliveredLogs(); !slices.Equal(got, tt.want) {
				t.Errorf("delivered\n%v\nwant\n%v", got, tt.want)
			}
			if !slices.Equal(h.gaps, tt.wantGap) || h.m.Running(logsKey) {
				t.Errorf("gaps %v, running %v; want %v", h.gaps, h.m.Running(logsKey), tt.wantGap)
			}
		})
	}
}
