package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// pushKind is what a subscription variant is pushed.
type pushKind uint8

const (
	pushCounter pushKind = iota // {"n","conn","params"}: passed through, in order
	pushHeads                   // the chain's heads: gap-free
	pushLogs                    // the chain's logs matching the filter: gap-free
)

// variant is eth_subscribe params a client may choose.
type variant struct {
	params string
	kind   pushKind
	filter *logFilter // pushLogs
}

func mustVariant(params string, kind pushKind) variant {
	v := variant{params: params, kind: kind}
	if kind == pushLogs {
		var args []json.RawMessage
		if json.Unmarshal([]byte(params), &args) != nil || len(args) != 2 {
			panic(params)
		}
		f, ok := parseFilter(args[1])
		if !ok {
			panic(params)
		}
		v.filter = f
	}
	return v
}

// subVariants are the eth_subscribe params clients choose from. A few
// variants shared by many clients exercise the shared upstream
// subscriptions. The chain variants (newHeads, logs filters naming the
// chain's logs) must be gap-free; the others are pushed payloads that are
// no head and no log (a pending-transactions kind, a node-specific kind,
// logs filters for addresses the chain never uses), which muxd must pass
// through untouched and in order; a push carrying the wrong variant's
// params is crosstalk.
var subVariants = []variant{
	mustVariant(`["newHeads"]`, pushHeads),
	mustVariant(fmt.Sprintf(`["logs",{"address":%q}]`, chainAddrs[0]), pushLogs),
	mustVariant(fmt.Sprintf(`["logs",{"address":[%q,%q],"topics":[%q]}]`, chainAddrs[1], chainAddrs[2], chainEvents[0]), pushLogs),
	mustVariant(fmt.Sprintf(`["logs",{"topics":[null,[%q,%q]]}]`, chainSubjects[0], chainSubjects[2]), pushLogs),
	mustVariant(`["logs",{}]`, pushLogs),
	mustVariant(`["newPendingTransactions"]`, pushCounter),
	mustVariant(`["chaos_ticks",{"every":"20ms"}]`, pushCounter),
	mustVariant(fmt.Sprintf(`["logs",{"address":"0x%040x","topics":[["0x%064x"]]}]`, 0xdead1, 3), pushCounter),
	mustVariant(fmt.Sprintf(`["logs",{"address":"0x%040x","topics":[["0x%064x"]]}]`, 0xdead2, 10), pushCounter),
}

// chainVariants are the indexes of the gap-free variants, for the
// watchers (clients holding one subscription for the whole run).
var chainVariants = []int{0, 1, 2, 3, 4}

// breakLog collects the gaps clients saw in gap-free subscriptions,
// de-duplicated by subscription params and place (every subscriber of a
// key sees a gap of the key), so they can be held against the gaps muxd
// counted.
type breakLog struct {
	mu      sync.Mutex
	byKind  map[string]map[string]string // kind -> place -> description
	samples []string
	never   map[string]string // params+log -> description: removed:true for a log never delivered
}

func newBreakLog() *breakLog { return &breakLog{byKind: map[string]map[string]string{}} }

func (b *breakLog) add(kind, params, place, desc string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.byKind[kind]
	if m == nil {
		m = map[string]string{}
		b.byKind[kind] = m
	}
	k := params + " " + place
	if _, ok := m[k]; !ok {
		m[k] = desc
		if len(b.samples) < 10 {
			b.samples = append(b.samples, params+": "+desc)
		}
	}
}

func (b *breakLog) count(kind string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.byKind[kind])
}

// headCheck is what a newHeads subscriber has been delivered.
type headCheck struct {
	hashes map[uint64]string // number -> hash of the delivered chain
	first  uint64
	last   uint64
	have   bool
}

// logPos is a log's place in chain order.
type logPos struct{ num, index uint64 }

func (p logPos) less(q logPos) bool { return p.num < q.num || (p.num == q.num && p.index < q.index) }

// logCheck is what a logs subscriber has been delivered.
type logCheck struct {
	live  []*chainLog     // delivered and not removed, in delivery (chain) order
	ever  map[string]bool // blockHash/logIndex delivered
	gone  map[string]bool // blockHash/logIndex removed
	first logPos          // the first log delivered
	have  bool
	hist  []string // the last deliveries, for reports
}

func logKey(l *chainLog) string { return l.hash + "/" + strconv.FormatUint(l.index, 10) }

// onHeadPush checks a newHeads push: a head the node mined, exactly its
// newHeads object, the child of the last head delivered; or, after a
// reorg, the child of a delivered head whose successor the reorg
// orphaned. A head further on (a gap) or not chained to the delivered
// ones is a break.
func (c *client) onHeadPush(sid string, l *liveSub, res json.RawMessage) {
	var h struct {
		Hash string `json:"hash"`
	}
	if json.Unmarshal(res, &h) != nil {
		c.fail("newHeads push for %s is no header: %.300s", sid, res)
		return
	}
	b := c.chain.block(h.Hash)
	if b == nil {
		c.fail("newHeads push for %s: a head the node never mined: %.300s", sid, res)
		return
	}
	if !bytes.Equal(res, b.head) {
		c.fail("newHeads push for %s is not the node's newHeads object of block %d:\n got %s\nwant %s", sid, b.num, res, b.head)
		return
	}
	c.stats.HeadPushes++
	s := &l.heads
	if s.hashes == nil {
		s.hashes = map[uint64]string{}
	}
	if s.have {
		switch {
		case b.num == s.last+1 && b.parent == s.hashes[s.last]:
		case b.num <= s.last && s.hashes[b.num] == b.hash:
			c.fail("newHeads %s: head %d %s delivered twice", sid, b.num, b.hash[:10])
			return
		case b.num <= s.last+1 && (b.parent == s.hashes[b.num-1] || b.num <= s.first):
			// A reorg: the heads it replaced were orphaned.
			if old := s.hashes[b.num]; old != "" && c.chain.canonical(old) {
				c.fail("newHeads %s: head %d %s replaces %s, which is still canonical", sid, b.num, b.hash[:10], old[:10])
			}
			c.stats.HeadReorgs++
		case b.num > s.last+1:
			c.gaps.add("newHeads", l.params, b.hash, fmt.Sprintf("head %d after head %d", b.num, s.last))
		default:
			c.gaps.add("newHeads", l.params, b.hash, fmt.Sprintf("head %d %s (parent %s) does not chain to the delivered head %d %s", b.num, b.hash[:10], b.parent[:10], b.num-1, s.hashes[b.num-1]))
		}
	} else {
		s.first = b.num
	}
	for n := b.num + 1; n <= s.last; n++ {
		delete(s.hashes, n)
	}
	s.hashes[b.num] = b.hash
	delete(s.hashes, b.num-min(b.num, 512))
	s.last, s.have = b.num, true
}

// onLogPush checks a logs push: a log the node made, exactly as it makes
// it, matching the subscription's filter, each (block hash, log index)
// delivered once, in chain order, on the branch of the last log delivered
// and not removed, with no matching log of that branch skipped;
// removed:true only for a log of an orphaned block that was delivered
// (or may have been, before this subscriber joined the key).
func (c *client) onLogPush(sid string, l *liveSub, res json.RawMessage) {
	var p struct {
		BlockHash string `json:"blockHash"`
		LogIndex  string `json:"logIndex"`
		Removed   bool   `json:"removed"`
	}
	if json.Unmarshal(res, &p) != nil {
		c.fail("logs push for %s is no log: %.300s", sid, res)
		return
	}
	b := c.chain.block(p.BlockHash)
	idx, err := strconv.ParseUint(strings.TrimPrefix(p.LogIndex, "0x"), 16, 64)
	if b == nil || err != nil || idx >= uint64(len(b.logs)) {
		c.fail("logs push for %s: a log the node never made: %.300s", sid, res)
		return
	}
	cl := &b.logs[idx]
	want := cl.raw
	if p.Removed {
		want = cl.removed
	}
	if !bytes.Equal(res, want) {
		c.fail("logs push for %s is not the node's log:\n got %s\nwant %s", sid, res, want)
		return
	}
	if !l.filter.matches(cl) {
		c.fail("logs push for %s does not match its filter %s (crosstalk): %.300s", sid, l.params, res)
		return
	}
	s := &l.logs
	if s.ever == nil {
		s.ever, s.gone = map[string]bool{}, map[string]bool{}
	}
	key := logKey(cl)
	pos := logPos{cl.num, cl.index}
	s.hist = append(s.hist, fmt.Sprintf("%d/%d:%s:%v", cl.num, cl.index, cl.hash[2:6], p.Removed))
	if len(s.hist) > 16 {
		s.hist = s.hist[1:]
	}
	if p.Removed {
		c.stats.RemovedLogs++
		switch {
		case c.chain.canonical(cl.hash):
			c.fail("logs %s: removed:true for log %d/%d of a canonical block", sid, cl.num, cl.index)
		case s.gone[key]:
			c.fail("logs %s: removed:true twice for log %d/%d", sid, cl.num, cl.index)
		case s.ever[key]:
			for i, x := range s.live {
				if x == cl {
					s.live = append(s.live[:i], s.live[i+1:]...)
					break
				}
			}
		case !s.have || pos.less(s.first):
			c.stats.RemovedUnseen++ // delivered to the key before this subscriber joined
		default:
			c.stats.RemovedNever++
			c.gaps.addNever(l.params+" "+key, fmt.Sprintf("%s: removed:true for log %d/%d %s, never delivered (first delivered %d/%d)", l.params, cl.num, cl.index, cl.hash[:10], s.first.num, s.first.index))
		}
		s.gone[key] = true
		return
	}
	c.stats.LogPushes++
	if s.ever[key] {
		c.fail("logs %s %s: log %d/%d %s delivered twice (canonical %v); this subscriber's last deliveries (number/index:hash:removed) %v", sid, l.params, cl.num, cl.index, cl.hash[:10], c.chain.canonical(cl.hash), s.hist)
		return
	}
	if n := len(s.live); n > 0 {
		top := s.live[n-1]
		topPos := logPos{top.num, top.index}
		switch {
		case !topPos.less(pos):
			c.fail("logs %s %s: log %d/%d %s after log %d/%d %s: out of chain order; last deliveries %v", sid, l.params, cl.num, cl.index, cl.hash[:10], top.num, top.index, top.hash[:10], s.hist)
		case c.chain.ancestor(cl.hash, top.num) == nil || c.chain.ancestor(cl.hash, top.num).hash != top.hash:
			c.gaps.add("logs", l.params, key, fmt.Sprintf("log %d/%d %s is not on the branch of the last delivered log %d/%d %s, which was not removed", cl.num, cl.index, cl.hash[:10], top.num, top.index, top.hash[:10]))
		default:
			if skipped := c.skipped(l.filter, top, cl); len(skipped) > 0 {
				c.gaps.add("logs", l.params, key, fmt.Sprintf("log %d/%d after %d/%d skips %d matching logs (first %d/%d)", cl.num, cl.index, top.num, top.index, len(skipped), skipped[0].num, skipped[0].index))
			}
		}
	}
	if !s.have {
		s.first, s.have = pos, true
	}
	s.ever[key] = true
	s.live = append(s.live, cl)
	if len(s.live) > 1024 {
		s.live = append(s.live[:0], s.live[len(s.live)-512:]...)
	}
}

// skipped returns the logs matching f on the branch of to that lie
// strictly between from and to.
func (c *client) skipped(f *logFilter, from, to *chainLog) []*chainLog {
	var out []*chainLog
	lo, hi := logPos{from.num, from.index}, logPos{to.num, to.index}
	for n := to.num; n >= from.num && n+256 > to.num; n-- {
		b := c.chain.ancestor(to.hash, n)
		for i := range b.logs {
			x := &b.logs[i]
			p := logPos{x.num, x.index}
			if lo.less(p) && p.less(hi) && f.matches(x) {
				out = append(out, x)
			}
		}
		if n == 0 {
			break
		}
	}
	sort.Slice(out, func(i, j int) bool { return logPos{out[i].num, out[i].index}.less(logPos{out[j].num, out[j].index}) })
	return out
}

func (b *breakLog) addNever(place, desc string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.never == nil {
		b.never = map[string]string{}
	}
	if _, ok := b.never[place]; !ok {
		b.never[place] = desc
	}
}

// pastBlock reports whether c's kept subscription was delivered a head or
// a log of a block above top, and if not, what it was last delivered.
func (c *client) pastBlock(top uint64) (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.live {
		if !l.keep {
			continue
		}
		switch l.kind {
		case pushHeads:
			if l.heads.have && l.heads.last > top {
				return true, ""
			}
			return false, fmt.Sprintf("%s: last head %d (have %v)", l.params, l.heads.last, l.heads.have)
		case pushLogs:
			if n := len(l.logs.live); n > 0 && l.logs.live[n-1].num > top {
				return true, ""
			}
			return false, fmt.Sprintf("%s: last deliveries %v", l.params, l.logs.hist)
		}
	}
	return false, "no kept subscription live"
}
