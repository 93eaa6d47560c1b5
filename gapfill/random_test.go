package gapfill

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/router"
)

// This file drives the machine with a simulated node whose chain reorgs at
// random, over a connection that drops at random, with the node answering
// the machine's requests in any order and pushing on the same wire as it
// answers (one ordered stream, as a WebSocket is). A subscriber's view of
// each key is checked as the chaos suite checks it (integration/chaos):
// heads chained, logs in chain order on one branch with a removal before
// another branch's, none twice, none skipped; a break is allowed only when
// the machine counted a gap for that key.

const (
	randHeadsKey = `["newHeads"]`
	randLogsKey  = `["logs",{"address":"0xaa"}]`
)

// rblock is a block of the random chain.
type rblock struct {
	num          uint64
	hash, parent string
	logs         []lg // in log index order
}

// randNode is the node: a chain with its side branches, the subscriptions
// registered on the current connection, the requests it owes and the wire
// of messages it has written that the machine has not read yet.
type randNode struct {
	rng       *rand.Rand
	blocks    map[string]*rblock
	canon     []*rblock
	nextHash  uint64
	connected bool
	subs      map[string]bool
	owed      []Send
	wire      []wireMsg
	reorgs    int
	lastOrph  []*rblock
	note      func(format string, args ...any)
	v         variant
}

// wireMsg is one message on the wire: a push, an answer, or the answer to
// the subscribe of key (the key is then live).
type wireMsg struct {
	kind   byte // 'p' push, 'a' answer, 's' subscribed
	key    string
	id     uint64
	result []byte // push result; answer result (nil: an error answer)
}

// variant is how a run's node behaves, chosen from its seed.
type variant struct {
	depth     int  // deepest reorg
	reorgOdds int  // one block mined in reorgOdds reorgs
	errOdds   int  // one answer in errOdds is an error
	oneHead   bool // a reorg pushes only the new top head (geth after the merge)
	logsFirst bool // a block's logs may be pushed before its head
	newFirst  bool // a reorg's new logs may be pushed before the old ones' removals (two feeds in geth)
	headsLate bool // a reorg's heads come after all the new branch's logs
	shorten   bool // a reorg's new branch may be shorter than the old
	dup       bool // a push may be repeated
	back      bool // a reorg may go back to the branch the last one orphaned
	noRemoved bool // the node never pushes removed:true (anvil)
}

// behaviours are the node behaviours a run may add to the plain one, by
// the name GAPFILL_VARIANT takes ("mixed" picks some from the seed).
var behaviours = map[string]func(v *variant, seed uint64){
	"oneHead":   func(v *variant, _ uint64) { v.oneHead = true },
	"logsFirst": func(v *variant, _ uint64) { v.logsFirst = true },
	"newFirst":  func(v *variant, _ uint64) { v.newFirst = true },
	"deep":      func(v *variant, _ uint64) { v.depth, v.reorgOdds = 8, 3 },
	"headsLate": func(v *variant, _ uint64) { v.headsLate = true },
	"shorten":   func(v *variant, _ uint64) { v.shorten = true },
	"dup":       func(v *variant, _ uint64) { v.dup = true },
	"back":      func(v *variant, _ uint64) { v.back = true },
	"noRemoved": func(v *variant, _ uint64) { v.noRemoved = true },
	"mixed": func(v *variant, seed uint64) {
		v.oneHead, v.newFirst, v.logsFirst = seed%2 == 0, seed%3 == 0, seed%5 == 0
	},
}

// variantOf spreads the seeds over the node's behaviours: the plain one
// and, one seed in seven each, oneHead, logsFirst, newFirst, deep,
// noRemoved and noRemoved with logsFirst (anvil); or those GAPFILL_VARIANT
// names (comma-separated) for every seed.
func variantOf(seed uint64) variant {
	v := variant{depth: 3, reorgOdds: 6, errOdds: 30}
	spread := []string{"", "oneHead", "logsFirst", "newFirst", "deep", "noRemoved", "noRemoved,logsFirst"}
	names := strings.Split(spread[seed%uint64(len(spread))], ",")
	if e := os.Getenv("GAPFILL_VARIANT"); e != "" {
		names = strings.Split(e, ",")
	}
	for _, name := range names {
		if add := behaviours[name]; add != nil {
			add(&v, seed)
		}
	}
	return v
}

func newRandNode(rng *rand.Rand, v variant) *randNode {
	n := &randNode{rng: rng, v: v, blocks: map[string]*rblock{}}
	n.canon = append(n.canon, n.makeBlock(0, "0x"+strings.Repeat("0", 64)))
	for range 5 {
		n.canon = append(n.canon, n.makeBlock(uint64(len(n.canon)), n.top().hash))
	}
	return n
}

func (n *randNode) top() *rblock { return n.canon[len(n.canon)-1] }

func (n *randNode) makeBlock(num uint64, parent string) *rblock {
	n.nextHash++
	b := &rblock{num: num, hash: fmt.Sprintf("0x%064x", n.nextHash), parent: parent}
	for i := range n.rng.IntN(4) {
		addr := "0xaa"
		if n.rng.IntN(3) == 0 {
			addr = "0xbb"
		}
		b.logs = append(b.logs, lg{block: num, hash: b.hash, index: uint64(i), addr: addr})
	}
	n.blocks[b.hash] = b
	return b
}

func (b *rblock) blk() blk { return blk{num: b.num, hash: b.hash, parent: b.parent} }

// mine adds a block; one time in six it first orphans the top one to three
// blocks. Live subscriptions are pushed what geth pushes: the orphaned
// blocks' matching logs with removed:true, then each new block's head and
// matching logs.
func (n *randNode) mine(reorg bool) {
	var orphaned, added []*rblock
	if lo := n.lastOrph; reorg && n.v.back && len(lo) > 0 && n.rng.IntN(n.v.reorgOdds) == 0 && lo[0].num < uint64(len(n.canon)) && lo[0].num > 5 && n.canon[lo[0].num-1].hash == lo[0].parent {
		top := int(lo[0].num)
		orphaned = slices.Clone(n.canon[top:])
		n.canon = append(n.canon[:top], lo...)
		added = slices.Clone(lo)
		n.lastOrph = orphaned
		n.reorgs++
	} else if reorg && n.rng.IntN(n.v.reorgOdds) == 0 && len(n.canon) > 5 {
		depth := 1 + n.rng.IntN(n.v.depth)
		top := len(n.canon) - depth
		orphaned = slices.Clone(n.canon[top:])
		n.canon = n.canon[:top]
		n.reorgs++
		add := depth
		if n.v.shorten && depth > 1 && n.rng.IntN(2) == 0 {
			add = depth - 1 - n.rng.IntN(depth-1)
		}
		for range add {
			b := n.makeBlock(uint64(len(n.canon)), n.top().hash)
			n.canon = append(n.canon, b)
			added = append(added, b)
		}
		n.lastOrph = orphaned
	}
	b := n.makeBlock(uint64(len(n.canon)), n.top().hash)
	n.canon = append(n.canon, b)
	added = append(added, b)
	if n.note != nil {
		n.note("node mines %d %s (orphaned %d) logs %v", b.num, b.hash[60:], len(orphaned), b.logs)
	}
	if !n.connected {
		return
	}
	var removals []wireMsg
	mark := len(n.wire)
	defer func() {
		if len(removals) == 0 {
			return
		}
		if n.v.newFirst && n.rng.IntN(2) == 0 {
			n.wire = append(n.wire, removals...) // after the new branch
		} else {
			n.wire = append(n.wire[:mark], append(removals, n.wire[mark:]...)...)
		}
	}()
	if n.subs[randLogsKey] && !n.v.noRemoved {
		for _, o := range orphaned {
			for _, l := range o.logs {
				if l.addr == "0xaa" {
					removals = append(removals, wireMsg{kind: 'p', key: randLogsKey, result: logJSON(l, true)})
				}
			}
		}
	}
	var late []wireMsg
	defer func() {
		if n.v.dup && len(n.wire) > mark && n.rng.IntN(4) == 0 {
			i := mark + n.rng.IntN(len(n.wire)-mark)
			n.wire = append(n.wire, n.wire[i])
		}
	}()
	headsLate := n.v.headsLate && len(orphaned) > 0
	defer func() { n.wire = append(n.wire, late...) }()
	for i, b := range added {
		if headsLate && n.subs[randHeadsKey] && (!n.v.oneHead || i == len(added)-1) {
			late = append(late, wireMsg{kind: 'p', key: randHeadsKey, result: headJSON(b.blk())})
		}
		logsFirst := n.v.logsFirst && n.rng.IntN(2) == 0
		if n.subs[randHeadsKey] && !headsLate && !logsFirst && (!n.v.oneHead || i == len(added)-1) {
			n.wire = append(n.wire, wireMsg{kind: 'p', key: randHeadsKey, result: headJSON(b.blk())})
		}
		if n.subs[randLogsKey] {
			for _, l := range b.logs {
				if l.addr == "0xaa" {
					n.wire = append(n.wire, wireMsg{kind: 'p', key: randLogsKey, result: logJSON(l, false)})
				}
			}
		}
		if n.subs[randHeadsKey] && !headsLate && logsFirst && (!n.v.oneHead || i == len(added)-1) {
			n.wire = append(n.wire, wireMsg{kind: 'p', key: randHeadsKey, result: headJSON(b.blk())})
		}
	}
}

// answer answers one request it owes, chosen at random, from the chain as
// it is now.
func (n *randNode) answerOne() {
	if len(n.owed) == 0 {
		return
	}
	i := n.rng.IntN(len(n.owed))
	s := n.owed[i]
	n.owed = slices.Delete(n.owed, i, i+1)
	var res []byte
	if n.rng.IntN(n.v.errOdds) != 0 { // else an error answer
		res = n.result(s)
	}
	n.wire = append(n.wire, wireMsg{kind: 'a', id: s.ID, result: res})
	if n.note != nil {
		n.note("node answers %d %s %s: %.120s", s.ID, s.Method, s.Params, res)
	}
}

func (n *randNode) result(s Send) []byte {
	params := string(s.Params)
	switch s.Method {
	case "eth_blockNumber":
		return []byte(strconv.Quote(quantity(n.top().num)))
	case "eth_getBlockByNumber":
		q := params[2 : strings.IndexByte(params[2:], '"')+2]
		if q == "latest" {
			return blockJSON(n.top().blk())
		}
		if num, ok := router.ParseQuantity(q); ok && num < uint64(len(n.canon)) {
			return blockJSON(n.canon[num].blk())
		}
		return []byte("null")
	case "eth_getBlockByHash":
		if b := n.blocks[params[2:68]]; b != nil {
			return blockJSON(b.blk())
		}
		return []byte("null")
	case "eth_getLogs":
		var logs []lg
		if i := strings.Index(params, `"blockHash":"`); i >= 0 {
			b := n.blocks[params[i+13:i+13+66]]
			if b == nil {
				return nil // geth: unknown block
			}
			logs = b.logs
		} else {
			from, to := quantityAfter(params, `"fromBlock":"`), quantityAfter(params, `"toBlock":"`)
			for num := from; num <= to && num < uint64(len(n.canon)); num++ {
				logs = append(logs, n.canon[num].logs...)
			}
		}
		out := []byte("[")
		for _, l := range logs {
			if l.addr != "0xaa" {
				continue
			}
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, logJSON(l, false)...)
		}
		return append(out, ']')
	}
	return nil
}

func quantityAfter(s, member string) uint64 {
	i := strings.Index(s, member)
	if i < 0 {
		return 0
	}
	rest := s[i+len(member):]
	q, _ := router.ParseQuantity(rest[:strings.IndexByte(rest, '"')])
	return q
}

// subscriber is what one subscriber of each key sees, checked as it comes.
type subscriber struct {
	t     *testing.T
	node  *randNode
	seed  uint64
	trace []string // the last deliveries and events, for a failure's message

	// newHeads
	heads    map[uint64]string
	last     uint64
	haveLast bool

	// logs: delivered and not removed, in delivery order; ever delivered
	// (and not removed since)
	live []lg
	ever map[string]bool

	breaks  map[string][]string // key -> breaks seen
	reasons map[string]int      // kind/reason -> gaps counted
	gaps    map[string]int      // key -> gaps the machine counted
}

func (s *subscriber) note(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf(format, args...))
	if len(s.trace) > 5000 {
		s.trace = s.trace[len(s.trace)-5000:]
	}
}

func (s *subscriber) fail(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d: %s\nlast events:\n  %s", s.seed, fmt.Sprintf(format, args...), strings.Join(s.trace, "\n  "))
}

func (s *subscriber) brk(key, format string, args ...any) {
	s.breaks[key] = append(s.breaks[key], fmt.Sprintf(format, args...)+" after "+strings.Join(s.trace[max(0, len(s.trace)-12):], " | "))
}

func (s *subscriber) onHead(res []byte) {
	h, ok := parseHeader(res)
	if !ok {
		s.fail("newHeads delivery is no head: %s", res)
	}
	s.note("head %d %s", h.num, h.hash[60:])
	if s.heads == nil {
		s.heads = map[uint64]string{}
	}
	if s.haveLast {
		switch {
		case h.num == s.last+1 && h.parent == s.heads[s.last]:
		case h.num <= s.last && s.heads[h.num] == h.hash:
			s.fail("head %d delivered twice", h.num)
		case h.num <= s.last+1 && h.parent == s.heads[h.num-1]:
			// a reorg
		default:
			s.brk(randHeadsKey, "head %d does not chain to head %d", h.num, s.last)
		}
	}
	for num := h.num + 1; num <= s.last; num++ {
		delete(s.heads, num)
	}
	s.heads[h.num] = h.hash
	s.last, s.haveLast = h.num, true
}

// ancestor returns the hash of the block at num on the branch of hash.
func (n *randNode) ancestor(hash string, num uint64) string {
	b := n.blocks[hash]
	for b != nil && b.num > num {
		b = n.blocks[b.parent]
	}
	if b == nil || b.num != num {
		return ""
	}
	return b.hash
}

func (s *subscriber) onLog(res []byte) {
	l, ok := parseLog(res)
	if !ok {
		s.fail("logs delivery is no log: %s", res)
	}
	s.note("log %d/%d %s removed=%v", l.block, l.index, l.hash[60:], l.removed)
	b := s.node.blocks[l.hash]
	if b == nil || l.index >= uint64(len(b.logs)) || b.logs[l.index].addr != "0xaa" {
		s.fail("a log the node never made or that does not match: %s", res)
	}
	ref := logID(l)
	if l.removed {
		if !s.ever[ref] {
			s.brk(randLogsKey, "removal of log %d/%d never delivered", l.block, l.index)
			return
		}
		delete(s.ever, ref)
		s.live = slices.DeleteFunc(s.live, func(x lg) bool { return x.hash == l.hash && x.index == l.index })
		return
	}
	if s.ever[ref] {
		s.fail("log %d/%d delivered twice", l.block, l.index)
	}
	s.ever[ref] = true
	got := lg{block: l.block, hash: l.hash, index: l.index, addr: "0xaa"}
	if k := len(s.live); k > 0 {
		top := s.live[k-1]
		switch {
		case top.block > l.block || (top.block == l.block && top.index >= l.index):
			s.brk(randLogsKey, "log %d/%d after %d/%d: out of order", l.block, l.index, top.block, top.index)
		case s.node.ancestor(l.hash, top.block) != top.hash:
			s.brk(randLogsKey, "log %d/%d not on the branch of %d/%d, which was not removed", l.block, l.index, top.block, top.index)
		default:
			if skipped := s.node.matchingBetween(top, got); skipped > 0 {
				s.brk(randLogsKey, "log %d/%d after %d/%d skips %d logs", l.block, l.index, top.block, top.index, skipped)
			}
		}
	}
	s.live = append(s.live, got)
}

// matchingBetween counts the matching logs on to's branch strictly
// between from and to.
func (n *randNode) matchingBetween(from, to lg) int {
	count := 0
	for num := to.block; num >= from.block; num-- {
		b := n.blocks[n.ancestor(to.hash, num)]
		for _, l := range b.logs {
			after := l.block > from.block || l.index > from.index
			before := l.block < to.block || l.index < to.index
			if l.addr == "0xaa" && after && before {
				count++
			}
		}
		if num == 0 {
			break
		}
	}
	return count
}

// randRun is one seeded run.
type randRun struct {
	t        *testing.T
	m        *Machine
	n        *randNode
	sub      *subscriber
	now      time.Time
	push     []byte // the push being handed to Push
	covered  uint64 // the logs key's, as last noted
	logsOnly bool   // no client holds newHeads: the machine sees no heads
}

func (r *randRun) apply(e Effects) {
	for _, s := range e.Sends {
		if r.n.connected {
			r.n.owed = append(r.n.owed, s)
		}
	}
	for _, d := range e.Deliveries {
		res := d.Result
		if d.Live {
			res = r.push
		}
		switch d.Key {
		case randHeadsKey:
			r.sub.onHead(res)
		case randLogsKey:
			r.sub.onLog(res)
		}
	}
	for _, g := range e.Gaps {
		r.sub.gaps[g.Key]++
		r.sub.reasons[g.Kind+"/"+g.Reason]++
		r.sub.note("gap %s %s (seed %d)", g.Kind, g.Reason, r.sub.seed)
	}
}

// read hands the machine the next message on the wire.
func (r *randRun) read() {
	if len(r.n.wire) == 0 {
		return
	}
	w := r.n.wire[0]
	r.n.wire = r.n.wire[1:]
	switch w.kind {
	case 'p':
		if l, ok := parseLog(w.result); ok {
			r.sub.note("read push log %d/%d %s removed=%v", l.block, l.index, l.hash[60:], l.removed)
		} else {
			r.sub.note("read push %s %.60s", w.key[:6], w.result)
		}
		r.push = w.result
		r.apply(r.m.Push(w.key, pushParams(w.result), r.now))
		r.push = nil
	case 'a':
		r.sub.note("read answer %d", w.id)
		r.apply(r.m.Answer(w.id, w.result, r.now))
	case 's':
		r.sub.note("read subscribed %s", w.key)
		r.apply(r.m.Live(w.key, r.now))
	}
}

func (r *randRun) connect() {
	r.sub.note("connected")
	r.n.connected = true
	r.n.subs = map[string]bool{}
	keys := []string{randHeadsKey, randLogsKey}
	if r.logsOnly {
		keys = keys[1:]
	}
	for _, key := range keys {
		r.n.subs[key] = true // registered at the node now; live at muxd when the answer is read
		r.n.wire = append(r.n.wire, wireMsg{kind: 's', key: key})
	}
}

func (r *randRun) disconnect() {
	r.n.connected = false
	r.n.subs, r.n.owed, r.n.wire = nil, nil, nil
	r.m.Disconnected()
	r.sub.note("disconnected")
}

func (r *randRun) step() {
	if k := r.m.keys[randLogsKey]; k != nil && k.covered != r.covered {
		r.sub.note("covered %d -> %d", r.covered, k.covered)
		r.covered = k.covered
	}
	switch x := r.n.rng.IntN(100); {
	case x < 15:
		r.n.mine(true)
	case x < 45:
		r.n.answerOne()
	case x < 85:
		r.read()
	case x < 93:
		r.now = r.now.Add(time.Duration(r.n.rng.IntN(1500)) * time.Millisecond)
		r.apply(r.m.Tick(r.now))
	case x < 96:
		if r.n.connected {
			r.disconnect()
		}
	default:
		if !r.n.connected {
			r.connect()
		}
	}
}

// settle lets every request be answered and every message be read, with
// time moving on, until nothing is left and no job runs.
func (r *randRun) settle() {
	for range 10000 {
		if len(r.n.owed) == 0 && len(r.n.wire) == 0 && r.m.keys[randLogsKey] != nil && r.m.keys[randLogsKey].job == nil &&
			(r.m.keys[randHeadsKey] == nil || r.m.keys[randHeadsKey].job == nil) && len(r.m.headWaits) == 0 {
			return
		}
		r.n.answerOne()
		r.read()
		r.now = r.now.Add(100 * time.Millisecond)
		r.apply(r.m.Tick(r.now))
	}
	var jobs []string
	for key, k := range r.m.keys {
		if j := k.job; j != nil {
			jobs = append(jobs, fmt.Sprintf("%s: wait %v fetching %v chunks %d inflight %d queue %d restarts %d resumeAt %v deadline %v now %v reqs %d", key, j.wait, j.fetching, j.chunks, j.inflight, len(j.queue), j.restarts, j.resumeAt, j.deadline, r.now, len(r.m.reqs)))
		}
	}
	r.t.Fatalf("seed %d: did not settle: owed %d wire %d jobs %v headWaits %d\n%s", r.sub.seed, len(r.n.owed), len(r.n.wire), jobs, len(r.m.headWaits), strings.Join(r.sub.trace[max(0, len(r.sub.trace)-40):], "\n"))
}

// TestRandomReorgsAndCuts runs many seeded runs of a reorging chain over a
// connection cut at random and checks every subscriber's view; at the end
// of each, with the connection up and the chain quiet, the logs delivered
// from the first on must be the chain's logs exactly.
func TestRandomReorgsAndCuts(t *testing.T) {
	seeds, steps := 200, 600
	if testing.Short() {
		seeds = 40
	}
	if v, err := strconv.Atoi(os.Getenv("GAPFILL_SEEDS")); err == nil && v > 0 {
		seeds = v // a longer search: GAPFILL_SEEDS=20000 go test -run TestRandomReorgsAndCuts ./gapfill
	}
	var withGaps, reorgs, deliveries int
	reasons := map[string]int{}
	first := uint64(0)
	if v, err := strconv.ParseUint(os.Getenv("GAPFILL_SEED"), 10, 64); err == nil {
		first, seeds = v, 1 // one seed, to trace it: GAPFILL_SEED=2105
	}
	for seed := first; seed < first+uint64(seeds); seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x6a9))
		r := &randRun{t: t, m: New(Config{Blocks: 128}), n: newRandNode(rng, variantOf(seed)), now: time.Unix(1_700_000_000, 0)}
		r.sub = &subscriber{t: t, node: r.n, seed: seed, ever: map[string]bool{}, breaks: map[string][]string{}, gaps: map[string]int{}, reasons: map[string]int{}}
		r.n.note = r.sub.note
		// A logs subscription alone, as ethers' contract.on makes. (Not
		// with a node that pushes a reorg's new logs before its removals:
		// with no heads muxd cannot tell, and passes on the node's order,
		// as a client of the node gets it directly.)
		r.logsOnly = seed%3 == 2 && !r.n.v.newFirst && !r.n.v.noRemoved && os.Getenv("GAPFILL_NOLOGSONLY") == "" // a logs subscription alone, as ethers' contract.on makes
		// A quiet start: the keys learn where they start and are
		// delivered a few blocks before the first reorg or cut (a reorg
		// below a key's first head or log is a gap it cannot fill).
		r.connect()
		r.settle()
		for range 8 {
			r.n.mine(false)
			r.settle()
		}
		for range steps {
			r.step()
		}
		if !r.n.connected {
			r.connect()
		}
		r.settle()
		for range 3 {
			r.n.mine(false)
			r.settle()
		}
		for key, b := range r.sub.breaks {
			if r.sub.gaps[key] == 0 {
				t.Fatalf("seed %d: %s: %d breaks and no gap counted; first: %s\ntrace:\n  %s", seed, key, len(b), b[0], strings.Join(r.sub.trace, "\n  "))
			}
		}
		if len(r.sub.gaps) > 0 {
			withGaps++
			for k, v := range r.sub.reasons {
				reasons[k] += v
			}
			if os.Getenv("GAPFILL_LIST") != "" {
				t.Logf("seed %d: gaps %v", seed, r.sub.reasons)
			}
			if os.Getenv("GAPFILL_TRACE") == strconv.FormatUint(seed, 10) {
				t.Logf("seed %d trace:\n  %s", seed, strings.Join(r.sub.trace, "\n  "))
			}
			continue
		}
		// No gap: the logs from the first delivered on are the chain's.
		// From where the key started: nothing missed before its first
		// log, nor after all it was delivered was removed.
		{
			start := r.m.keys[randLogsKey].start
			var want []lg
			for _, b := range r.n.canon[start+1:] {
				for _, l := range b.logs {
					if l.addr == "0xaa" {
						want = append(want, l)
					}
				}
			}
			if !slices.Equal(r.sub.live, want) {
				t.Fatalf("seed %d: delivered logs (start %d)\n%v\nwant the chain's\n%v\ntrace:\n  %s", seed, start, r.sub.live, want, strings.Join(r.sub.trace, "\n  "))
			}
		}
		if len(r.sub.live) > 0 {
			first := r.sub.live[0]
			var want []lg
			for _, b := range r.n.canon[first.block:] {
				for _, l := range b.logs {
					if l.addr == "0xaa" && (l.block > first.block || l.index >= first.index) {
						want = append(want, l)
					}
				}
			}
			if r.n.ancestor(r.n.top().hash, first.block) == first.hash && !slices.Equal(r.sub.live, want) {
				t.Fatalf("seed %d: delivered logs\n%v\nwant the chain's\n%v", seed, r.sub.live, want)
			}
		}
		if !r.logsOnly && (!r.sub.haveLast || r.sub.heads[r.sub.last] != r.n.top().hash) {
			t.Fatalf("seed %d: last head delivered %d, the node's %d", seed, r.sub.last, r.n.top().num)
		}
		reorgs += r.n.reorgs
		deliveries += len(r.sub.live)
	}
	t.Logf("%d seeds: %d with a gap counted (%v); without: %d reorgs, %d logs delivered", seeds, withGaps, reasons, reorgs, deliveries)
	if withGaps > seeds/4 && seeds > 1 {
		t.Errorf("%d of %d runs counted a gap: the runs check too little", withGaps, seeds)
	}
}
