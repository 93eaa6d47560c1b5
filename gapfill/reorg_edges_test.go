package gapfill

import (
	"slices"
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
