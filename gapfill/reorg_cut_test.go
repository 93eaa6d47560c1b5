package gapfill

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The rows below are a reorg across a cut of the path to the node, as the
// anvil suite runs it (integration/anvil: anvil pushes a reorg's new logs
// and heads in either order and never pushes removed:true). Each found a
// way for a logs key to end up on two branches at once: its covered block
// named by one, a remembered block by the other. A backfill then saw the
// fork move on every round of identical answers (forkMoved), and past
// MaxForkRestarts delivered the new branch while an orphaned log stood.

// cutRun is the start of a row: heads and logs keys live on chain a,
// blocks 11..20 pushed (each head, then the key's log), then the path is
// cut. Every block of a and of b (a branch from fork) has one log of the
// key.
func cutRun(t *testing.T, fork uint64) (*harness, *node, *streamCheck) {
	t.Helper()
	a, b := chainOf(0, 0, 40), chainOf(1, fork, 40)
	var logs []lg
	for n := uint64(1); n <= 40; n++ {
		logs = append(logs, lg{n, a[n].hash, 0, "0xaa"})
		if n > fork {
			logs = append(logs, lg{n, b[n].hash, 0, "0xaa"})
		}
	}
	nd := &node{chain: a, head: 10, logs: logs, extra: map[string]blk{}}
	for n := fork + 1; n <= 40; n++ {
		nd.extra[a[n].hash], nd.extra[b[n].hash] = a[n], b[n]
	}
	h := newHarness(t, Config{Blocks: 128}, nd)
	c := &streamCheck{t: t, a: a, b: b, errorf: t.Errorf}
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.apply(h.m.Live(logsKey, h.now), nil)
	for n := uint64(11); n <= 20; n++ {
		nd.head = n
		h.push(headsKey, headJSON(a[n]))
		h.push(logsKey, logJSON(lg{n, a[n].hash, 0, "0xaa"}, false))
	}
	c.take(h)
	h.m.Disconnected()
	return h, nd, c
}

// pushBranch pushes blocks from..to of br: every log before every head
// (logsFirst), or the other way round.
func pushBranch(h *harness, br map[uint64]blk, from, to uint64, logsFirst bool) {
	logs := func() {
		for n := from; n <= to; n++ {
			h.push(logsKey, logJSON(lg{n, br[n].hash, 0, "0xaa"}, false))
		}
	}
	heads := func() {
		for n := from; n <= to; n++ {
			h.push(headsKey, headJSON(br[n]))
		}
	}
	if logsFirst {
		logs()
		heads()
	} else {
		heads()
		logs()
	}
}

// settle lets time pass for what waits (a log for its head, a paused
// backfill).
func (h *harness) settle(c *streamCheck) {
	for range 8 {
		h.tick(h.m.cfg.HeadWait)
		c.take(h)
	}
}

// latestAsked counts the logs key's requests for the node's head: one per
// round of a backfill.
func latestAsked(sends []Send) int {
	n := 0
	for _, s := range sends {
		if s.Key == logsKey && s.Method == "eth_getBlockByNumber" && strings.Contains(string(s.Params), "latest") {
			n++
		}
	}
	return n
}

// checkCanonical fails unless the logs standing are br's from 11 to top
// and no gap was counted.
func checkCanonical(t *testing.T, h *harness, c *streamCheck, br map[uint64]blk, top uint64) {
	t.Helper()
	var want []lg
	for n := uint64(11); n <= top; n++ {
		want = append(want, lg{n, br[n].hash, 0, "0xaa"})
	}
	if !slices.Equal(c.standing, want) {
		t.Errorf("logs standing\n%v\nwant the chain's\n%v", c.standing, want)
	}
	if len(h.fullGaps) != 0 {
		t.Errorf("gaps %+v, want none", h.fullGaps)
	}
}

// TestReorgCutRangeStraddles: the backfill after the cut is told the head
// (26 of a), then the node reorganises (b from 22) and answers its range
// eth_getLogs from b, while it pushes b's logs and heads (held) in either
// order. The fetched logs name blocks under other hashes than the head's
// answer: the job starts over and delivers b, after the removals of a's
// replaced blocks. Before, it delivered b's logs with its covered block
// named by a's hash, and a backfill then saw the fork move on identical
// answers, restarted MaxForkRestarts times and delivered anyway, counting
// late (one run of these rows in ten, by map order). After a second cut
// with the chain unchanged, the backfill takes one round.
func TestReorgCutRangeStraddles(t *testing.T) {
	for _, logsFirst := range []bool{true, false} {
		for _, newBefore := range []bool{true, false} {
			t.Run(fmt.Sprintf("logs first %v, new branch pushed before the answer %v", logsFirst, newBefore), func(t *testing.T) {
				reorgCutRangeStraddles(t, logsFirst, newBefore)
			})
		}
	}
}

func reorgCutRangeStraddles(t *testing.T, logsFirst, newBefore bool) {
	h, nd, c := cutRun(t, 22)
	nd.head = 26
	var held []Send
	nd.hook = func(s Send) ([]byte, bool, bool) {
		if s.Method == "eth_getLogs" {
			held = append(held, s)
			return nil, false, true
		}
		return nil, false, false
	}
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.apply(h.m.Live(logsKey, h.now), nil)
	if len(held) == 0 {
		t.Fatalf("no eth_getLogs asked")
	}
	// a's next block, then the reorg.
	nd.head = 27
	pushBranch(h, c.a, 27, 27, logsFirst)
	nd.chain, nd.head = c.b, 27
	if newBefore {
		pushBranch(h, c.b, 23, 27, logsFirst)
	}
	c.take(h)
	nd.hook = nil
	h.answerHeld(nd, func() { c.take(h) })
	// Cut again at once, the chain unchanged: the backfill after it
	// takes one round.
	h.m.Disconnected()
	before := len(nd.seen)
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.apply(h.m.Live(logsKey, h.now), nil)
	if !newBefore {
		pushBranch(h, c.b, 23, 27, logsFirst)
	}
	h.settle(c)
	if n := latestAsked(nd.seen[before:]); n != 1 {
		t.Errorf("the backfill after the second cut asked for the head %d times, want 1 (one round)", n)
	}
	nd.head = 28
	pushBranch(h, c.b, 28, 28, logsFirst)
	h.settle(c)
	checkCanonical(t, h, c, c.b, 28)
}

// TestReorgCutQuietKeyOffBranch: the backfill after the cut delivers a's
// block 21 and 22 (the head's answer: 22); then the node reorganises from
// 20 onto b, whose blocks have no log of the key, and pushes only b's
// heads, the first on this connection. Covered may not move onto b above
// a's 21 and 22, whose logs would stand unremoved (anvil pushes no
// removals): a backfill finds the fork and removes them. Before, the key's
// covered block took b's hash and its logs of a stood for good.
func TestReorgCutQuietKeyOffBranch(t *testing.T) {
	h, nd, c := cutRun(t, 20)
	nd.logs = slices.DeleteFunc(nd.logs, func(l lg) bool { return l.hash == c.b[l.block].hash && l.block > 20 })
	nd.head = 22
	h.apply(h.m.Live(logsKey, h.now), nil)
	c.take(h)
	nd.chain, nd.head = c.b, 25
	h.apply(h.m.Live(headsKey, h.now), nil)
	for n := uint64(23); n <= 25; n++ {
		h.push(headsKey, headJSON(c.b[n]))
	}
	h.settle(c)
	var want []lg
	for n := uint64(11); n <= 20; n++ {
		want = append(want, lg{n, c.a[n].hash, 0, "0xaa"})
	}
	if !slices.Equal(c.standing, want) {
		t.Errorf("logs standing\n%v\nwant the chain's (b has none above 20)\n%v", c.standing, want)
	}
	if len(h.fullGaps) != 0 {
		t.Errorf("gaps %+v, want none", h.fullGaps)
	}
}

// TestReorgForkKeepsMoving: after the cut, the node's answers disagree
// round after round (its head from a, its logs from b: a node whose
// chain keeps reorganising, or a pool of nodes behind one address). The
// backfill starts over at once MaxForkRestarts times, then once every
// RetryDelay; it never delivers what it fetched on answers that disagree.
// When they agree again it delivers b, after a's replaced blocks removed,
// with no gap. When they still disagree at its deadline it delivers
// nothing it fetched and states the blocks it owes (20, above the block
// covered, to the head it learned, 26), which a backfill after the next
// cut fetches.
func TestReorgForkKeepsMoving(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rounds int // rounds whose answers disagree
		gaps   []string
	}{
		{name: "settles after six rounds", rounds: 6},
		{name: "settles after the deadline", rounds: 1 << 30, gaps: []string{"timeout 20..26"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, nd, c := cutRun(t, 22)
			nd.chain, nd.head = c.b, 26
			asked := 0
			nd.hook = func(s Send) ([]byte, bool, bool) {
				if s.Key == logsKey && s.Method == "eth_getBlockByNumber" && strings.Contains(string(s.Params), "latest") {
					if asked++; asked <= tc.rounds {
						return blockJSON(c.a[26]), true, false
					}
				}
				return nil, false, false
			}
			h.apply(h.m.Live(logsKey, h.now), nil)
			c.take(h)
			if len(c.standing) != 10 {
				t.Fatalf("the backfill delivered while its answers disagree: %v", c.standing)
			}
			for h.m.Running(logsKey) && h.now.Before(time.Unix(1_700_000_000, 0).Add(2*h.m.cfg.JobTimeout)) {
				h.tick(h.m.cfg.RetryDelay)
				c.take(h)
			}
			if got := keyGaps(h, logsKey); !slices.Equal(got, tc.gaps) {
				t.Errorf("gaps %v, want %v", got, tc.gaps)
			}
			if tc.gaps != nil {
				// The node agrees with itself again; the next backfill
				// fetches the blocks owed.
				nd.hook = nil
				h.fullGaps = nil
				h.m.Disconnected()
				h.apply(h.m.Live(logsKey, h.now), nil)
				c.take(h)
			} else if asked != tc.rounds+1 {
				t.Errorf("%d rounds, want %d", asked, tc.rounds+1)
			}
			checkCanonical(t, h, c, c.b, 26)
		})
	}
}

// TestLogsHeaderCheckLost: a block fetched by hash whose hash the job
// knows only as the head's parent has its header asked alongside its
// logs; the node answering that with an error, or null, loses the check,
// not the logs.
func TestLogsHeaderCheckLost(t *testing.T) {
	for _, answer := range [][]byte{nil, []byte("null")} {
		t.Run(fmt.Sprintf("answer %s", answer), func(t *testing.T) {
			h, nd, c := cutRun(t, 40)
			nd.head = 22
			headerAsked := 0
			nd.hook = func(s Send) ([]byte, bool, bool) {
				if s.Method == "eth_getBlockByHash" {
					headerAsked++
					return answer, true, false
				}
				return nil, false, false
			}
			h.apply(h.m.Live(logsKey, h.now), nil)
			for range 8 {
				h.tick(h.m.cfg.RetryDelay)
			}
			c.take(h)
			if headerAsked == 0 {
				t.Fatalf("no header asked by hash")
			}
			checkCanonical(t, h, c, c.a, 22)
		})
	}
}

// TestHeadsTargetOrphaned: the node pushes head 16 of a branch, then
// reorganises (fork at 12) and forgets the orphaned blocks (anvil): the
// backfill's walk from 16 asks for its parent by hash and gets null,
// twice. The head is of a branch that is gone: the job ends without it,
// no gap, and the node's head is asked for; the new branch goes out from
// where the delivered chain forks. (Before: asked 20 times, then the job
// gave up, counted unavailable, and delivered the orphaned head, which
// does not chain.)
func TestHeadsTargetOrphaned(t *testing.T) {
	main, forked := chainOf(0, 0, 40), chainOf(1, 12, 40)
	nd := &node{chain: main, head: 10}
	h := newHarness(t, Config{Blocks: 128}, nd)
	h.apply(h.m.Live(headsKey, h.now), nil)
	for n := uint64(1); n <= 10; n++ {
		h.push(headsKey, headJSON(main[n]))
	}
	h.out, h.outKeys = nil, nil
	nd.chain, nd.head = forked, 16
	h.push(headsKey, headJSON(main[16]))
	for range 4 {
		h.tick(h.m.cfg.RetryDelay)
	}
	if got, want := h.deliveredHeads(), headsOf(forked, 11, 16); !slices.Equal(got, want) {
		t.Errorf("heads\n%v\nwant\n%v", got, want)
	}
	if len(h.fullGaps) != 0 {
		t.Errorf("gaps %+v, want none", h.fullGaps)
	}
}
