package gapfill

import (
	"slices"
	"strings"
	"testing"
)

// review6Setup: heads and logs keys live, blocks 1..8 of main pushed (no
// logs), then 9A and 10A each with one log of 0xaa.
func review6Setup(t *testing.T) (*harness, map[uint64]blk, map[uint64]blk) {
	main, forked := chainOf(0, 0, 20), chainOf(1, 8, 20)
	h := newHarness(t, Config{Blocks: 128}, &node{chain: main, head: 8})
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.apply(h.m.Live(logsKey, h.now), nil)
	for b := uint64(1); b <= 10; b++ {
		h.push(headsKey, headJSON(main[b]))
		if b >= 9 {
			h.push(logsKey, logJSON(lg{b, main[b].hash, 0, "0xaa"}, false))
		}
	}
	return h, main, forked
}

// One head per reorg (geth after the merge) and the new branch's logs
// before the removals (two feeds): reorg two deep, the new branch has no
// log in block 9. Head 11B names only blocks 10 and 11, so the synthesized
// removals cover 10A but not 9A; 10B is delivered while 9A stands, and the
// node's removal of 9A comes after 10B and 11B.
func TestLogsReviewOneHeadNewFirstDeep(t *testing.T) {
	h, main, forked := review6Setup(t)
	h.n.chain = forked
	h.n.head = 11
	h.push(headsKey, headJSON(forked[11]))
	h.push(logsKey, logJSON(lg{10, forked[10].hash, 0, "0xaa"}, false))
	h.push(logsKey, logJSON(lg{11, forked[11].hash, 0, "0xaa"}, false))
	h.push(logsKey, logJSON(lg{9, main[9].hash, 0, "0xaa"}, true))
	h.push(logsKey, logJSON(lg{10, main[10].hash, 0, "0xaa"}, true))
	got := h.deliveredLogsTo(logsKey)
	// 9A and 10A removed (any order) before 10B.
	i10B := slices.Index(got, logString(10, forked[10].hash, 0, false))
	i9Ar := slices.Index(got, logString(9, main[9].hash, 0, true))
	t.Logf("delivered %v gaps %v", got, h.gaps)
	if i10B < 0 || i9Ar < 0 || i9Ar > i10B {
		if len(h.gaps) == 0 {
			t.Errorf("9A not removed before the new branch's 10B, no gap counted")
		}
	}
}

// Full heads, but the new branch's logs (one batch in geth's reorg) come
// before its heads: logs 9B 10B 11B, then heads 9B 10B 11B. Head 9B (not
// above the last, 10A) makes noteHead send every delivered block above 9
// removed: 10B and 11B, which are canonical.
func TestLogsReviewHeadsAfterLogs(t *testing.T) {
	h, main, forked := review6Setup(t)
	h.n.chain = forked
	h.n.head = 11
	h.push(logsKey, logJSON(lg{9, main[9].hash, 0, "0xaa"}, true))
	h.push(logsKey, logJSON(lg{10, main[10].hash, 0, "0xaa"}, true))
	for b := uint64(9); b <= 11; b++ {
		h.push(logsKey, logJSON(lg{b, forked[b].hash, 0, "0xaa"}, false))
	}
	for b := uint64(9); b <= 11; b++ {
		h.push(headsKey, headJSON(forked[b]))
	}
	got := h.deliveredLogsTo(logsKey)
	t.Logf("delivered %v gaps %v", got, h.gaps)
	for _, s := range got {
		if s == logString(10, forked[10].hash, 0, true) || s == logString(11, forked[11].hash, 0, true) {
			t.Errorf("canonical log removed: %s", s)
		}
	}
}

// Same-height (one-deep) variant with one lagging head: logs 10B and 11B
// come before head 10B.
func TestLogsReviewHeadLagsOneBlock(t *testing.T) {
	main, forked := chainOf(0, 0, 20), chainOf(1, 9, 20)
	h := newHarness(t, Config{Blocks: 128}, &node{chain: main, head: 8})
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.apply(h.m.Live(logsKey, h.now), nil)
	for b := uint64(1); b <= 10; b++ {
		h.push(headsKey, headJSON(main[b]))
	}
	h.push(logsKey, logJSON(lg{10, main[10].hash, 0, "0xaa"}, false))
	h.n.chain, h.n.head = forked, 11
	h.push(logsKey, logJSON(lg{10, main[10].hash, 0, "0xaa"}, true))
	h.push(logsKey, logJSON(lg{10, forked[10].hash, 0, "0xaa"}, false))
	h.push(logsKey, logJSON(lg{11, forked[11].hash, 0, "0xaa"}, false))
	h.push(headsKey, headJSON(forked[10]))
	h.push(headsKey, headJSON(forked[11]))
	got := h.deliveredLogsTo(logsKey)
	t.Logf("delivered %v gaps %v", got, h.gaps)
	if s := logString(11, forked[11].hash, 0, true); slices.Contains(got, s) {
		t.Errorf("canonical log removed: %s", s)
	}
}

// A logs job runs (reconnect) and its answers come from before a reorg at
// block 10; the node's pushes of the reorg are held: the new branch's
// 10B first (two feeds), its removal of 10A only after the job ended. The
// job delivers 10A; the held 10B is then dropped as stale (block 10 was
// delivered under another hash), the node's removal of 10A goes out,
// and 10B is never delivered: later heads move covered past block 10,
// so not even a reconnect fetches it. No gap is counted.
func TestLogsReviewHeldNewBeforeRemovalAfterJob(t *testing.T) {
	main, forked := chainOf(0, 0, 20), chainOf(1, 9, 20)
	a9, a10, b10 := lg{9, main[9].hash, 0, "0xaa"}, lg{10, main[10].hash, 0, "0xaa"}, lg{10, forked[10].hash, 0, "0xaa"}
	n := &node{chain: main, head: 8, logs: []lg{a9, a10}}
	h := newHarness(t, Config{Blocks: 128}, n)
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.apply(h.m.Live(logsKey, h.now), nil)
	for b := uint64(1); b <= 9; b++ {
		h.push(headsKey, headJSON(main[b]))
	}
	h.push(logsKey, logJSON(a9, false))
	h.m.Disconnected()
	n.head = 10
	n.hook = func(Send) ([]byte, bool, bool) { return nil, false, true } // hold every answer
	h.apply(h.m.Live(logsKey, h.now), nil)
	if h.m.keys[logsKey].job == nil {
		t.Fatal("no job")
	}
	h.push(logsKey, logJSON(b10, false)) // held
	// The job's first answers come from the chain before the reorg (its
	// eth_getLogs the last of them); any later ones from the new branch.
	pre := &node{chain: main, head: 10, logs: []lg{a9, a10}}
	switched := false
	n.hook = func(s Send) ([]byte, bool, bool) {
		if switched {
			return nil, false, false
		}
		res, _ := pre.answer(s)
		if s.Method == "eth_getLogs" && strings.Contains(string(s.Params), main[10].hash) {
			switched = true
			n.chain, n.head, n.logs = forked, 10, []lg{a9, b10}
		}
		return res, true, false
	}
	for len(h.unans) > 0 {
		s := h.unans[0]
		h.unans = h.unans[1:]
		res, _ := n.answer(s)
		h.apply(h.m.Answer(s.ID, res, h.now), nil)
	}
	if h.m.keys[logsKey].job != nil {
		t.Fatal("job still running")
	}
	n.chain, n.head, n.logs = forked, 13, []lg{a9, b10}
	h.push(logsKey, logJSON(a10, true)) // the node's removal, after the job
	h.apply(h.m.Live(headsKey, h.now), nil)
	for b := uint64(11); b <= 13; b++ {
		h.push(headsKey, headJSON(forked[b]))
	}
	h.m.Disconnected()
	h.apply(h.m.Live(logsKey, h.now), nil)
	got := h.deliveredLogsTo(logsKey)
	t.Logf("delivered %v gaps %v", got, h.gaps)
	if !slices.Contains(got, logString(10, b10.hash, 0, false)) && len(h.gaps) == 0 {
		t.Errorf("10B never delivered, no gap counted")
	}
}

// askChecks indexes j.checks[-2] (panic): resolveChecks decrements
// j.asked for every check it takes, also for one it never asked (its hash
// came with the head's answer: the head and its parent). Blocks 5..10
// remembered (a log each) and replaced during the outage (branch B,
// forked at 4). The node's "latest" is 7B (a load-balanced provider whose
// backend is behind the one answering by number, or the head answered
// before 8B..10B were mined); the checks of 9 and 8 are answered before
// that of 10. When 10's comes, resolveChecks takes 10, 9, 8 (asked) and 7,
// 6 (the head's) in one go: asked is -2, and 5 is asked as checks[-2].
func TestLogsReviewAskChecksNegative(t *testing.T) {
	main, forked := chainOf(0, 0, 20), chainOf(1, 4, 20)
	var logs []lg
	for b := uint64(5); b <= 10; b++ {
		logs = append(logs, lg{b, main[b].hash, 0, "0xaa"})
	}
	n := &node{chain: main, head: 4}
	h := newHarness(t, Config{Blocks: 128}, n)
	h.apply(h.m.Live(logsKey, h.now), nil)
	for _, l := range logs {
		h.push(logsKey, logJSON(l, false))
	}
	h.m.Disconnected()
	n.chain, n.head = forked, 10
	n.hook = func(s Send) ([]byte, bool, bool) {
		p := string(s.Params)
		if strings.Contains(p, "latest") {
			return blockJSON(forked[7]), true, false
		}
		if strings.Contains(p, `"0xa"`) && s.Method == "eth_getBlockByNumber" {
			return nil, false, true // answered last
		}
		return nil, false, false
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic: %v", r)
		}
	}()
	h.apply(h.m.Live(logsKey, h.now), nil)
	n.hook = nil
	for len(h.unans) > 0 {
		s := h.unans[0]
		h.unans = h.unans[1:]
		res, _ := n.answer(s)
		h.apply(h.m.Answer(s.ID, res, h.now), nil)
	}
	t.Logf("delivered %v gaps %v", h.deliveredLogsTo(logsKey), h.gaps)
}
