package gapfill

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLogsNewBranchBeforeRemoval: the node pushes the new branch's log of
// block 4 before the removal of the old branch's log of block 4 (geth's
// filter system reads removed and new logs from two channels in one
// select). The old log goes out removed first, then the new one; the
// node's own removal then matches nothing. (It was dropped as stale: the
// new branch's log was never delivered, and no gap counted.)
func TestLogsNewBranchBeforeRemoval(t *testing.T) {
	main, forked := chainOf(0, 0, 10), chainOf(1, 3, 10)
	h := newHarness(t, Config{Blocks: 128}, &node{chain: main, head: 3})
	h.apply(h.m.Live(logsKey, h.now), nil) // baseline: block 3
	a4 := lg{4, main[4].hash, 0, "0xaa"}
	b4 := lg{4, forked[4].hash, 0, "0xaa"}
	h.push(logsKey, logJSON(a4, false))
	h.push(logsKey, logJSON(b4, false)) // the new branch, before the removal
	h.push(logsKey, logJSON(a4, true))  // the node's removal
	want := []string{logString(4, a4.hash, 0, false), logString(4, a4.hash, 0, true), logString(4, b4.hash, 0, false)}
	if got := h.deliveredLogs(); !slices.Equal(got, want) || len(h.gaps) != 0 {
		t.Errorf("delivered %v gaps %v, want %v and none", got, h.gaps, want)
	}
}

// TestLogsOnlyRemovalThenCut: a logs-only key (no newHeads on the connection) whose only log
// is removed by a reorg two blocks deep; the connection is cut before the
// new branch's logs come. The backfill fetches from the removed block on
// and misses the new branch's log of the block below it, with no gap.
func TestLogsOnlyRemovalThenCut(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	main := chainOf(0, 0, 10)
	forked := chainOf(1, 3, 10) // blocks 4.. replaced
	m := New(Config{Blocks: 128})
	e := m.Live(logsKey, now)
	m.Answer(e.Sends[0].ID, []byte(`"0x3"`), now) // baseline: block 3
	a5 := lg{5, main[5].hash, 0, "0xaa"}
	m.Push(logsKey, pushParams(logJSON(a5, false)), now)
	m.Push(logsKey, pushParams(logJSON(a5, true)), now) // reorg: fork at 3
	m.Disconnected()
	// The new branch: a log in block 4 and one in block 5.
	n := &node{chain: forked, head: 6, logs: []lg{{4, forked[4].hash, 0, "0xaa"}, {5, forked[5].hash, 0, "0xaa"}}}
	h := &harness{t: t, m: m, n: n, now: now}
	h.apply(m.Live(logsKey, now), nil)
	for range 4 {
		h.tick(m.cfg.RetryDelay)
	}
	// The new branch's logs of blocks 4 and 5, none missed.
	want := []string{logString(4, forked[4].hash, 0, false), logString(5, forked[5].hash, 0, false)}
	if got := h.deliveredLogs(); !slices.Equal(got, want) || len(h.gaps) != 0 {
		t.Errorf("delivered after the reconnect %v gaps %v, want %v and none", got, h.gaps, want)
	}
}

// TestLogsUncoverKeepsCoveredBranch: uncover lowered covered to block n-1 with the hash the heads of
// the current connection name for it, while the key's job still runs and
// the key has delivered nothing of that branch. The next backfill takes
// that block as kept and fetches above it: the new branch's log in it is
// never delivered, and no gap is counted.
func TestLogsUncoverKeepsCoveredBranch(t *testing.T) {
	const headsKey = `["newHeads"]`
	now := time.Unix(1_700_000_000, 0)
	a := chainOf(0, 0, 30)  // branch A
	b := chainOf(1, 10, 30) // branch B: forks after 10
	c := chainOf(2, 10, 30) // branch C: B up to 11, its own from 12
	c[11] = b[11]
	c12 := c[12]
	c12.parent = b[11].hash
	c[12] = c12
	m := New(Config{Blocks: 128})
	h := &harness{t: t, m: m, n: &node{chain: a, head: 9}, now: now}
	h.apply(m.Live(headsKey, now), nil)
	h.apply(m.Live(logsKey, now), nil) // baseline 9
	// Live on branch A: heads 10..14, logs in 10 and 12.
	for n := uint64(10); n <= 14; n++ {
		h.n.head = n
		h.push(headsKey, headJSON(a[n]))
		if n == 10 || n == 12 {
			h.push(logsKey, logJSON(lg{n, a[n].hash, 0, "0xaa"}, false))
		}
	}
	t.Logf("covered %d %s", m.keys[logsKey].covered, m.keys[logsKey].coveredHash[:18])
	m.Disconnected()
	// Reconnect to a node on branch B; the logs job's requests stay
	// unanswered while the heads show B and then a reorg to C at 12.
	h.n = &node{chain: b, head: 13, hook: func(Send) ([]byte, bool, bool) { return nil, false, true }}
	h.apply(m.Live(headsKey, now), nil)
	h.apply(m.Live(logsKey, now), nil)
	h.push(headsKey, headJSON(b[12]))
	h.push(headsKey, headJSON(b[13]))
	h.push(headsKey, headJSON(c[12])) // reorg at 12, seen live
	t.Logf("covered %d %s after the reorg at 12", m.keys[logsKey].covered, m.keys[logsKey].coveredHash[:18])
	m.Disconnected()
	// Reconnect to a node on branch C, which has a matching log in
	// block 11 (B's, kept by C).
	for n, bl := range m.keys[logsKey].blocks {
		t.Logf("remembered block %d %s (%d logs)", n, bl.hash[:18], len(bl.logs))
	}
	h.out, h.outKeys = nil, nil
	h.n = &node{chain: c, head: 14, logs: []lg{{11, b[11].hash, 0, "0xaa"}, {13, c[13].hash, 0, "0xaa"}}}
	h.apply(m.Live(logsKey, now), nil)
	for range 4 {
		h.tick(m.cfg.RetryDelay)
	}
	// A's block 12 removed, then B's log in 11 (kept by C) and C's in 13.
	want := []string{logString(12, a[12].hash, 0, true), logString(11, b[11].hash, 0, false), logString(13, c[13].hash, 0, false)}
	if got := h.deliveredLogsTo(logsKey); !slices.Equal(got, want) || len(h.gaps) != 0 {
		t.Errorf("delivered after the last reconnect %v gaps %v, want %v and none", got, h.gaps, want)
	}
}

// liveWithLogs makes the heads and logs keys live on main and pushes
// heads 1..10 of it, each of the blocks logged followed by its one log of
// 0xaa; forked is the branch that leaves main above block fork.
func liveWithLogs(t *testing.T, fork uint64, logged ...uint64) (*harness, map[uint64]blk, map[uint64]blk) {
	main, forked := chainOf(0, 0, 20), chainOf(1, fork, 20)
	h := newHarness(t, Config{Blocks: 128}, &node{chain: main, head: 8})
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.apply(h.m.Live(logsKey, h.now), nil)
	for b := uint64(1); b <= 10; b++ {
		h.push(headsKey, headJSON(main[b]))
		if slices.Contains(logged, b) {
			h.push(logsKey, logJSON(lg{b, main[b].hash, 0, "0xaa"}, false))
		}
	}
	return h, main, forked
}

// TestLogsOneHeadNewLogsFirstDeepReorg: one head per reorg (geth after the merge) and the new branch's logs
// before the removals (two feeds): reorg two deep, the new branch has no
// log in block 9. Head 11B names only blocks 10 and 11, so the synthesized
// removals cover 10A but not 9A; 10B is delivered while 9A stands, and the
// node's removal of 9A comes after 10B and 11B.
func TestLogsOneHeadNewLogsFirstDeepReorg(t *testing.T) {
	h, main, forked := liveWithLogs(t, 8, 9, 10)
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

// TestLogsHeadsAfterTheirLogs: full heads, but the new branch's logs (one batch in geth's reorg) come
// before its heads: logs 9B 10B 11B, then heads 9B 10B 11B. Head 9B (not
// above the last, 10A) makes noteHead send every delivered block above 9
// removed: 10B and 11B, which are canonical.
func TestLogsHeadsAfterTheirLogs(t *testing.T) {
	h, main, forked := liveWithLogs(t, 8, 9, 10)
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

// TestLogsHeadLagsItsLogs: the same-height (one-deep) variant with one lagging head: logs 10B and 11B
// come before head 10B.
func TestLogsHeadLagsItsLogs(t *testing.T) {
	h, main, forked := liveWithLogs(t, 9, 10)
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

// TestLogsHeldNewLogBeforeRemovalAfterJob: a logs job runs (reconnect) and its answers come from before a reorg at
// block 10; the node's pushes of the reorg are held: the new branch's
// 10B first (two feeds), its removal of 10A only after the job ended. The
// job delivers 10A; the held 10B is then dropped as stale (block 10 was
// delivered under another hash), the node's removal of 10A goes out,
// and 10B is never delivered: later heads move covered past block 10,
// so not even a reconnect fetches it. No gap is counted.
func TestLogsHeldNewLogBeforeRemovalAfterJob(t *testing.T) {
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
	h.answerHeld(n, nil)
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

// TestLogsChecksFromTheHeadAnswer: askChecks indexed j.checks[-2] (panic): resolveChecks decrements
// j.asked for every check it takes, also for one it never asked (its hash
// came with the head's answer: the head and its parent). Blocks 5..10
// remembered (a log each) and replaced during the outage (branch B,
// forked at 4). The node's "latest" is 7B (a load-balanced provider whose
// backend is behind the one answering by number, or the head answered
// before 8B..10B were mined); the checks of 9 and 8 are answered before
// that of 10. When 10's comes, resolveChecks takes 10, 9, 8 (asked) and 7,
// 6 (the head's) in one go: asked is -2, and 5 is asked as checks[-2].
func TestLogsChecksFromTheHeadAnswer(t *testing.T) {
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
	h.answerHeld(n, nil)
	t.Logf("delivered %v gaps %v", h.deliveredLogsTo(logsKey), h.gaps)
}

// TestLogsLateNamesItsBlock: the node skips a log (block 11's) and pushes
// a later block's first, both on the branch the heads name: the skipped
// one cannot go out in order, and its gap names its block.
func TestLogsLateNamesItsBlock(t *testing.T) {
	h, main, _ := liveWithLogs(t, 8, 9, 10)
	h.n.head = 12
	h.push(headsKey, headJSON(main[11]))
	h.push(headsKey, headJSON(main[12]))
	h.push(logsKey, logJSON(lg{12, main[12].hash, 0, "0xaa"}, false))
	h.push(logsKey, logJSON(lg{11, main[11].hash, 0, "0xaa"}, false))
	if want := []Gap{{Kind: "logs", Reason: "late", Key: logsKey, From: 11, To: 11}}; !slices.Equal(h.fullGaps, want) {
		t.Errorf("gaps %+v, want %+v", h.fullGaps, want)
	}
}
