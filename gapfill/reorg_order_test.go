package gapfill

import (
	"fmt"
	"slices"
	"testing"
)

// The push orders a node uses for a reorg's heads and logs: geth's and
// anvil's log and head feeds are separate, so a reorg's new logs may come
// before its new heads, after them, or block by block in either order;
// geth pushes the orphaned logs again with removed:true (before or after
// the new ones: another feed), anvil never does; geth after the merge
// pushes only the new top head.
type reorgOrder struct {
	logsFirst bool   // every new log before the first new head
	perBlock  bool   // block by block: each block's logs, then its head (logsFirst) or the other way round
	oneHead   bool   // only the new top head is pushed
	removals  string // "": none (anvil); "before": before anything new; "after": after everything new
}

func (o reorgOrder) String() string {
	s := "heads first"
	if o.logsFirst {
		s = "logs first"
	}
	if o.perBlock {
		s += ", block by block"
	}
	if o.oneHead {
		s += ", one head"
	}
	if o.removals != "" {
		s += ", removals " + o.removals
	} else {
		s += ", no removals"
	}
	return s
}

// reorgOrders are every order the rows below run.
func reorgOrders() []reorgOrder {
	var out []reorgOrder
	for _, logsFirst := range []bool{true, false} {
		for _, perBlock := range []bool{false, true} {
			for _, oneHead := range []bool{false, true} {
				if perBlock && oneHead {
					continue
				}
				for _, rm := range []string{"", "before", "after"} {
					out = append(out, reorgOrder{logsFirst: logsFirst, perBlock: perBlock, oneHead: oneHead, removals: rm})
				}
			}
		}
	}
	return out
}

// streamCheck follows what one subscriber of the heads key and one of the
// logs key are delivered, against the two branches of a reorg: a log goes
// out only when every log standing (delivered, not removed) is on its
// branch and before it; a removal only of a standing log; a head only as
// the child of the last one or a reorg's new block (its parent delivered).
type streamCheck struct {
	t        *testing.T
	a, b     map[uint64]blk   // the old branch and the new one (sharing blocks up to the fork)
	more     []map[uint64]blk // other branches
	standing []lg
	heads    map[uint64]string
	last     uint64
	// errorf reports a break: a failure within the bound, a note past it
	// (where the gap states it).
	errorf func(format string, args ...any)
}

func (c *streamCheck) branchOf(hash string) map[uint64]blk {
	for _, br := range append([]map[uint64]blk{c.b, c.a}, c.more...) {
		for _, bl := range br {
			if bl.hash == hash {
				return br
			}
		}
	}
	return nil
}

func (c *streamCheck) take(h *harness) {
	c.t.Helper()
	for i, r := range h.out {
		switch h.outKeys[i] {
		case logsKey:
			c.log(r)
		case headsKey:
			c.head(r)
		}
	}
	h.out, h.outKeys = nil, nil
}

func (c *streamCheck) log(r []byte) {
	c.t.Helper()
	l, ok := parseLog(r)
	if !ok {
		c.t.Fatalf("logs delivery is no log: %s", r)
	}
	if l.removed {
		i := slices.IndexFunc(c.standing, func(s lg) bool { return s.block == l.block && s.hash == l.hash && s.index == l.index })
		if i < 0 {
			c.errorf("removal of %s, which does not stand", logString(l.block, l.hash, l.index, true))
			return
		}
		c.standing = slices.Delete(c.standing, i, i+1)
		return
	}
	br := c.branchOf(l.hash)
	for _, s := range c.standing {
		switch {
		case s.block == l.block && s.hash == l.hash && s.index == l.index:
			c.errorf("log %s delivered twice", logString(l.block, l.hash, l.index, false))
		case s.block > l.block || (s.block == l.block && s.index > l.index):
			c.errorf("log %s after %s: out of order", logString(l.block, l.hash, l.index, false), logString(s.block, s.hash, s.index, false))
		case br == nil || br[s.block].hash != s.hash:
			c.errorf("log %s while %s of another branch stands (its removal comes after, or never)",
				logString(l.block, l.hash, l.index, false), logString(s.block, s.hash, s.index, false))
		}
	}
	c.standing = append(c.standing, lg{l.block, l.hash, l.index, "0xaa"})
}

func (c *streamCheck) head(r []byte) {
	c.t.Helper()
	hd, ok := parseHeader(r)
	if !ok {
		c.t.Fatalf("newHeads delivery is no head: %s", r)
	}
	if c.heads == nil {
		c.heads = map[uint64]string{}
	}
	if c.last != 0 && !(hd.num <= c.last+1 && hd.parent == c.heads[hd.num-1]) {
		c.errorf("head %s does not chain to the heads delivered (last %d)", headString(hd.num, hd.hash), c.last)
	}
	for n := hd.num + 1; n <= c.last; n++ {
		delete(c.heads, n)
	}
	c.heads[hd.num], c.last = hd.hash, hd.num
}

// reorgRun is one row: heads and logs keys live on chain a, blocks
// 11..tip pushed live (each head, then its log), then a reorg of depth
// onto branch b pushed in order o, then block tip+1 of b. The node answers
// the machine's requests at once, or (held) only once every push of the
// reorg is in. It returns the checker, with the streams taken.
func reorgRun(t *testing.T, cfg Config, depth uint64, sparse string, o reorgOrder, held bool) (*harness, *streamCheck) {
	t.Helper()
	const start, tip = 10, 20
	fork := tip - depth
	a, b := chainOf(0, 0, 40), chainOf(1, fork, 40)
	// hasLog: the block of branch br has the key's log (index 0).
	hasLog := func(br map[uint64]blk, n uint64) bool {
		switch {
		case sparse == "old" && br[n].hash == a[n].hash && n == fork+1:
			return false
		case sparse == "new" && br[n].hash == b[n].hash && n == fork+1:
			return false
		}
		return true
	}
	var logs []lg
	for n := uint64(1); n <= 40; n++ {
		if hasLog(a, n) {
			logs = append(logs, lg{n, a[n].hash, 0, "0xaa"})
		}
		if n > fork && hasLog(b, n) {
			logs = append(logs, lg{n, b[n].hash, 0, "0xaa"})
		}
	}
	nd := &node{chain: a, head: start, logs: logs}
	h := newHarness(t, cfg, nd)
	c := &streamCheck{t: t, a: a, b: b, errorf: t.Errorf}
	if depth > uint64(cfg.Blocks)+1 {
		c.errorf = t.Logf
	}
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.apply(h.m.Live(logsKey, h.now), nil) // baseline: block 10
	for n := uint64(start + 1); n <= tip; n++ {
		nd.head = n
		h.push(headsKey, headJSON(a[n]))
		if hasLog(a, n) {
			h.push(logsKey, logJSON(lg{n, a[n].hash, 0, "0xaa"}, false))
		}
	}
	c.take(h)
	// The reorg.
	nd.chain = b
	nd.extra = map[string]blk{}
	for n := fork + 1; n <= tip; n++ {
		nd.extra[a[n].hash] = a[n]
	}
	if held {
		nd.hook = func(Send) ([]byte, bool, bool) { return nil, false, true }
	}
	pushHead := func(n uint64) {
		if !o.oneHead || n == tip {
			h.push(headsKey, headJSON(b[n]))
		}
	}
	pushLog := func(n uint64) {
		if hasLog(b, n) {
			h.push(logsKey, logJSON(lg{n, b[n].hash, 0, "0xaa"}, false))
		}
	}
	if o.removals == "before" {
		for n := fork + 1; n <= tip; n++ {
			if hasLog(a, n) {
				h.push(logsKey, logJSON(lg{n, a[n].hash, 0, "0xaa"}, true))
			}
		}
	}
	switch {
	case o.perBlock:
		for n := fork + 1; n <= tip; n++ {
			if o.logsFirst {
				pushLog(n)
				pushHead(n)
			} else {
				pushHead(n)
				pushLog(n)
			}
		}
	case o.logsFirst:
		for n := fork + 1; n <= tip; n++ {
			pushLog(n)
		}
		for n := fork + 1; n <= tip; n++ {
			pushHead(n)
		}
	default:
		for n := fork + 1; n <= tip; n++ {
			pushHead(n)
		}
		for n := fork + 1; n <= tip; n++ {
			pushLog(n)
		}
	}
	if o.removals == "after" {
		for n := fork + 1; n <= tip; n++ {
			if hasLog(a, n) {
				h.push(logsKey, logJSON(lg{n, a[n].hash, 0, "0xaa"}, true))
			}
		}
	}
	c.take(h)
	nd.hook = nil
	h.answerHeld(nd, func() { c.take(h) })
	// The next block, then time for what waits.
	nd.head = tip + 1
	h.push(headsKey, headJSON(b[tip+1]))
	h.push(logsKey, logJSON(lg{tip + 1, b[tip+1].hash, 0, "0xaa"}, false))
	c.take(h)
	for range 8 {
		h.tick(h.m.cfg.HeadWait)
		c.take(h)
	}
	return h, c
}

// sparseRows are the blocks without the key's log in a reorg run: none; the
// old branch's first block above the fork (the new branch's log of that
// number replaces no log: the node's first new log is below the old logs
// standing); the new branch's first block (the node's first new log is
// above old logs of blocks it replaced).
var sparseRows = []string{"", "old", "new"}

// TestReorgPushOrders: a live reorg at every depth up to backfill_blocks,
// pushed in every order a node uses, answered at once or only after the
// pushes: every logs stream, once its removals are applied, is the
// canonical chain's logs, and no log of a new block goes out while a log
// of a block it replaced stands; the heads chain; no gap is counted.
func TestReorgPushOrders(t *testing.T) {
	const blocks = 8
	for depth := uint64(1); depth <= blocks; depth++ {
		for _, sparse := range sparseRows {
			for _, o := range reorgOrders() {
				for _, held := range []bool{false, true} {
					name := fmt.Sprintf("depth %d, %s", depth, o)
					if sparse != "" {
						name += ", no log in the " + sparse + " branch's first block"
					}
					if held {
						name += ", answers after the pushes"
					}
					t.Run(name, func(t *testing.T) {
						reorgRowWithinBound(t, blocks, depth, sparse, o, held)
					})
				}
			}
		}
	}
}

func reorgRowWithinBound(t *testing.T, blocks int, depth uint64, sparse string, o reorgOrder, held bool) {
	h, c := reorgRun(t, Config{Blocks: blocks}, depth, sparse, o, held)
	b := c.b
	var want []lg
	for n := uint64(11); n <= 21; n++ {
		if !(sparse == "new" && n == 20-depth+1) {
			want = append(want, lg{n, b[n].hash, 0, "0xaa"})
		}
	}
	if !slices.Equal(c.standing, want) {
		t.Errorf("logs standing\n%v\nwant the canonical chain's\n%v", c.standing, want)
	}
	if c.last != 21 || c.heads[21] != b[21].hash {
		t.Errorf("last head %d, want 21 of the new branch", c.last)
	}
	if len(h.fullGaps) != 0 {
		t.Errorf("gaps %+v, want none", h.fullGaps)
	}
}

// logsGaps and headsGaps return the gaps counted for one key, as
// "reason from..to".
func keyGaps(h *harness, key string) []string {
	var s []string
	for _, g := range h.fullGaps {
		if g.Key == key {
			s = append(s, fmt.Sprintf("%s %d..%d", g.Reason, g.From, g.To))
		}
	}
	return s
}

// TestReorgPastBound: a live reorg deeper than what a logs key remembers
// (backfill_blocks 4: the blocks of the last 4 numbers and the one below,
// 16..20) in every push order: the key's gap is stated once, with the
// blocks whose logs may be stale (delivered, forgotten, never removed) or
// missing (below the backfill's floor): from above the fork point to 15.
// A newHeads key states the heads it does not get (one head pushed: the
// backfill delivers 16..20); with every head pushed it misses none. A
// reorg one deeper than Blocks is still made good.
func TestReorgPastBound(t *testing.T) {
	const blocks = 4
	for depth := uint64(5); depth <= 8; depth++ {
		fork := 20 - depth
		for _, o := range reorgOrders() {
			for _, held := range []bool{false, true} {
				name := fmt.Sprintf("depth %d, %s", depth, o)
				if held {
					name += ", answers after the pushes"
				}
				t.Run(name, func(t *testing.T) {
					h, c := reorgRun(t, Config{Blocks: blocks}, depth, "", o, held)
					var wantLogs, wantHeads []string
					// Heads first, the node's removals first: it removed
					// the forgotten logs itself, and its new logs come
					// named by their heads: nothing is missed.
					exact := o.removals == "before" && !o.logsFirst && !o.oneHead
					if depth > blocks+1 && !exact {
						reason := "reorg_too_deep"
						if o.removals == "before" {
							// The node removed every replaced log
							// itself: only the new branch's below the
							// floor are missing.
							reason = "too_long"
						}
						wantLogs = []string{fmt.Sprintf("%s %d..15", reason, fork+1)}
						if o.oneHead {
							wantHeads = []string{fmt.Sprintf("reorg_too_deep %d..15", fork+1)}
						}
					}
					if got := keyGaps(h, logsKey); !slices.Equal(got, wantLogs) {
						t.Errorf("logs gaps %v, want %v", got, wantLogs)
					}
					if got := keyGaps(h, headsKey); !slices.Equal(got, wantHeads) {
						t.Errorf("newHeads gaps %v, want %v", got, wantHeads)
					}
					// Outside the blocks stated, the logs standing are
					// the canonical chain's.
					var got, want []lg
					for _, l := range c.standing {
						if l.block <= fork || l.block > 15 || exact {
							got = append(got, l)
						}
					}
					for n := uint64(11); n <= 21; n++ {
						if n <= fork {
							want = append(want, lg{n, c.a[n].hash, 0, "0xaa"})
						} else if n > 15 || exact {
							want = append(want, lg{n, c.b[n].hash, 0, "0xaa"})
						}
					}
					if !slices.Equal(got, want) {
						t.Errorf("logs standing outside the gap\n%v\nwant\n%v", got, want)
					}
				})
			}
		}
	}
}

// TestReorgPastBoundAcrossCut: the connection is cut, the node reorganises
// deeper than backfill_blocks (4) and mines on to 24; both keys live again
// and the node pushes head 24. Each key states its own gap exactly: the
// newHeads key the new branch's heads it does not get (from above the
// fork point to 19: the backfill delivers 20..24); the logs key the blocks
// whose logs may be stale or missing (from above the fork point to 19: it
// remembered 16..20 and fetches 20..24).
func TestReorgPastBoundAcrossCut(t *testing.T) {
	for _, depth := range []uint64{2, 5, 6, 8, 12} {
		t.Run(fmt.Sprintf("depth %d", depth), func(t *testing.T) {
			fork := 20 - depth
			a, b := chainOf(0, 0, 40), chainOf(1, fork, 40)
			var logs []lg
			for n := uint64(1); n <= 40; n++ {
				logs = append(logs, lg{n, a[n].hash, 0, "0xaa"})
				if n > fork {
					logs = append(logs, lg{n, b[n].hash, 0, "0xaa"})
				}
			}
			nd := &node{chain: a, head: 10, logs: logs}
			h := newHarness(t, Config{Blocks: 4}, nd)
			h.apply(h.m.Live(headsKey, h.now), nil)
			h.apply(h.m.Live(logsKey, h.now), nil)
			for n := uint64(11); n <= 20; n++ {
				nd.head = n
				h.push(headsKey, headJSON(a[n]))
				h.push(logsKey, logJSON(lg{n, a[n].hash, 0, "0xaa"}, false))
			}
			h.m.Disconnected()
			nd.chain, nd.head = b, 24
			h.apply(h.m.Live(headsKey, h.now), nil)
			h.apply(h.m.Live(logsKey, h.now), nil)
			h.push(headsKey, headJSON(b[24]))
			h.push(logsKey, logJSON(lg{24, b[24].hash, 0, "0xaa"}, false))
			for range 4 {
				h.tick(h.m.cfg.RetryDelay)
			}
			// Both keys started above block 10: nothing below 11 was
			// owed to them.
			want := []string{fmt.Sprintf("reorg_too_deep %d..19", max(fork+1, 11))}
			if got := keyGaps(h, headsKey); !slices.Equal(got, want) {
				t.Errorf("newHeads gaps %v, want %v", got, want)
			}
			if got := keyGaps(h, logsKey); !slices.Equal(got, want) {
				t.Errorf("logs gaps %v, want %v", got, want)
			}
		})
	}
}

// TestReorgsBackToBackAnswersAfter: two reorgs in a row, each pushing its
// new logs before its new heads and no removals (anvil), while the backfill
// the first one's logs started waits for its answers, which come from the
// chain after the second. The first reorg's logs the second orphaned were
// held before the answers that left them out: they are stale and never go
// out, and the stream ends on the chain as it is. (Found with anvil: a log
// of the first new branch went out after the backfill delivered the
// second's.)
func TestReorgsBackToBackAnswersAfter(t *testing.T) {
	a, b := chainOf(0, 0, 40), chainOf(1, 11, 40)
	c := chainOf(2, 11, 40)
	for n := uint64(12); n <= 14; n++ {
		c[n] = b[n]
	}
	c15 := c[15]
	c15.parent = b[14].hash
	c[15] = c15
	var logs []lg
	for n := uint64(1); n <= 40; n++ {
		logs = append(logs, lg{n, a[n].hash, 0, "0xaa"})
		if n > 11 {
			logs = append(logs, lg{n, b[n].hash, 0, "0xaa"})
		}
		if n > 14 && n != 16 { // the second new branch has no log in 16
			logs = append(logs, lg{n, c[n].hash, 0, "0xaa"})
		}
	}
	nd := &node{chain: a, head: 10, logs: logs, extra: map[string]blk{}}
	h := newHarness(t, Config{Blocks: 8}, nd)
	sc := &streamCheck{t: t, a: a, b: b, more: []map[uint64]blk{c}, errorf: t.Errorf}
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.apply(h.m.Live(logsKey, h.now), nil)
	for n := uint64(11); n <= 16; n++ {
		nd.head = n
		h.push(headsKey, headJSON(a[n]))
		h.push(logsKey, logJSON(lg{n, a[n].hash, 0, "0xaa"}, false))
	}
	sc.take(h)
	for n := uint64(12); n <= 16; n++ {
		nd.extra[a[n].hash], nd.extra[b[n].hash] = a[n], b[n]
	}
	nd.hook = func(Send) ([]byte, bool, bool) { return nil, false, true }
	nd.chain = b
	for n := uint64(12); n <= 16; n++ {
		h.push(logsKey, logJSON(lg{n, b[n].hash, 0, "0xaa"}, false))
	}
	for n := uint64(12); n <= 16; n++ {
		h.push(headsKey, headJSON(b[n]))
	}
	nd.chain = c
	h.push(logsKey, logJSON(lg{15, c[15].hash, 0, "0xaa"}, false))
	h.push(headsKey, headJSON(c[15]))
	h.push(headsKey, headJSON(c[16]))
	sc.take(h)
	nd.hook = nil
	h.answerHeld(nd, func() { sc.take(h) })
	nd.head = 17
	h.push(headsKey, headJSON(c[17]))
	h.push(logsKey, logJSON(lg{17, c[17].hash, 0, "0xaa"}, false))
	for range 4 {
		h.tick(h.m.cfg.HeadWait)
	}
	sc.take(h)
	var want []lg
	for n := uint64(11); n <= 17; n++ {
		if n != 16 {
			want = append(want, lg{n, c[n].hash, 0, "0xaa"})
		}
	}
	if !slices.Equal(sc.standing, want) {
		t.Errorf("logs standing\n%v\nwant the chain's\n%v", sc.standing, want)
	}
	if len(h.fullGaps) != 0 {
		t.Errorf("gaps %+v, want none", h.fullGaps)
	}
}
