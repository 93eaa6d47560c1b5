package gapfill

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/router"
)

// blk is a block of a simulated chain.
type blk struct {
	num          uint64
	hash, parent string
}

func hashOf(branch, n uint64) string { return fmt.Sprintf("0x%016x%048x", branch+1, n) }

// chainOf returns blocks 0..to of branch, which shares every block up to
// and including fork with branch 0.
func chainOf(branch, fork, to uint64) map[uint64]blk {
	c := map[uint64]blk{}
	h := func(n uint64) string {
		if n <= fork {
			return hashOf(0, n)
		}
		return hashOf(branch, n)
	}
	for n := uint64(0); n <= to; n++ {
		b := blk{num: n, hash: h(n), parent: "0x" + strings.Repeat("0", 64)}
		if n > 0 {
			b.parent = h(n - 1)
		}
		c[n] = b
	}
	return c
}

// blockJSON is b as eth_getBlockByNumber(n, false) answers: geth's
// RPCMarshalBlock members, in alphabetical order.
func blockJSON(b blk) []byte {
	z := "0x" + strings.Repeat("0", 64)
	return fmt.Appendf(nil, `{"baseFeePerGas":"0x7","blobGasUsed":"0x0","difficulty":"0x0","excessBlobGas":"0x0","extraData":"0x","gasLimit":"0x1c9c380","gasUsed":"0x0","hash":%q,"logsBloom":"0x00","miner":"0x0000000000000000000000000000000000000000","mixHash":%q,"nonce":"0x0000000000000000","number":%q,"parentBeaconBlockRoot":%q,"parentHash":%q,"receiptsRoot":%q,"requestsHash":%q,"sha3Uncles":%q,"size":"0x2a1","stateRoot":%q,"timestamp":%q,"transactions":[],"transactionsRoot":%q,"uncles":[],"withdrawals":[],"withdrawalsRoot":%q}`,
		b.hash, z, quantity(b.num), z, b.parent, z, z, z, z, quantity(1000+b.num), z, z)
}

// headJSON is b as geth pushes it for newHeads.
func headJSON(b blk) []byte {
	h, ok := HeaderFromBlock(blockJSON(b))
	if !ok {
		panic("bad block")
	}
	return h
}

func pushParams(result []byte) []byte {
	return append(append([]byte(`{"subscription":"0xabc","result":`), result...), '}')
}

// lg is a log of the simulated node.
type lg struct {
	block uint64
	hash  string
	index uint64
	addr  string
}

func logJSON(l lg, removed bool) []byte {
	return fmt.Appendf(nil, `{"address":%q,"topics":[],"data":"0x","blockNumber":%q,"transactionHash":"0x%064x","transactionIndex":"0x0","blockHash":%q,"blockTimestamp":"0x1","logIndex":%q,"removed":%t}`,
		l.addr, quantity(l.block), l.block*1000+l.index, l.hash, quantity(l.index), removed)
}

// node answers the machine's requests from a chain and its logs.
type node struct {
	chain map[uint64]blk
	extra map[string]blk // blocks of other branches, by hash
	head  uint64
	logs  []lg
	// hook may answer a request itself (handled true): result nil is an
	// error answer, "null" a null one; drop true leaves it unanswered.
	hook func(s Send) (result []byte, handled, drop bool)
	seen []Send
}

func (n *node) answer(s Send) (res []byte, drop bool) {
	n.seen = append(n.seen, s)
	if n.hook != nil {
		if r, ok, d := n.hook(s); ok || d {
			return r, d
		}
	}
	var p []json.RawMessage
	_ = json.Unmarshal(s.Params, &p)
	switch s.Method {
	case "eth_blockNumber":
		return []byte(strconv.Quote(quantity(n.head))), false
	case "eth_getBlockByNumber":
		var q string
		_ = json.Unmarshal(p[0], &q)
		num, _ := router.ParseQuantity(q)
		if q == "latest" {
			num = n.head
		}
		if b, ok := n.chain[num]; ok && num <= n.head {
			return blockJSON(b), false
		}
		return []byte("null"), false
	case "eth_getBlockByHash":
		var h string
		_ = json.Unmarshal(p[0], &h)
		for _, b := range n.chain {
			if b.hash == h {
				return blockJSON(b), false
			}
		}
		if b, ok := n.extra[h]; ok {
			return blockJSON(b), false
		}
		return []byte("null"), false
	case "eth_getLogs":
		var f struct {
			From      string `json:"fromBlock"`
			To        string `json:"toBlock"`
			BlockHash string `json:"blockHash"`
			Address   string `json:"address"`
		}
		_ = json.Unmarshal(p[0], &f)
		from, _ := router.ParseQuantity(f.From)
		to, _ := router.ParseQuantity(f.To)
		known := f.BlockHash == "" // a block hash names a block the node has, on any branch
		for _, b := range n.chain {
			known = known || (b.hash == f.BlockHash && b.num <= n.head)
		}
		_, onOther := n.extra[f.BlockHash]
		if !known && !onOther {
			return nil, false // geth: "unknown block"
		}
		out := []byte("[")
		for _, l := range n.logs {
			switch {
			case f.BlockHash != "" && l.hash != f.BlockHash:
				continue
			case f.BlockHash == "" && (l.block < from || l.block > to || l.block > n.head || n.chain[l.block].hash != l.hash):
				continue
			}
			if f.Address != "" && f.Address != l.addr {
				continue
			}
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, logJSON(l, false)...)
		}
		return append(out, ']'), false
	}
	return nil, false
}

// harness drives a Machine against a node, as the wiring in mux does.
type harness struct {
	t        *testing.T
	m        *Machine
	n        *node
	now      time.Time
	out      [][]byte // delivered results, in order (live ones resolved)
	outKeys  []string // the key of each of out
	unans    []Send   // requests the node left unanswered
	heads    int
	logs     int
	gaps     []Gap
	fullGaps []Gap
	durs     int
	pending  []Send
}

func newHarness(t *testing.T, cfg Config, n *node) *harness {
	return &harness{t: t, m: New(cfg), n: n, now: time.Unix(1_700_000_000, 0)}
}

// apply carries out effects; live is what Push was given (for Live
// deliveries). Requests are answered one at a time, in order, until none
// is left (an unanswered one stays unanswered).
func (h *harness) apply(e Effects, live []byte) {
	h.collect(e, live)
	for len(h.pending) > 0 {
		s := h.pending[0]
		h.pending = h.pending[1:]
		res, drop := h.n.answer(s)
		if drop {
			h.unans = append(h.unans, s)
			continue
		}
		h.collect(h.m.Answer(s.ID, res, h.now), nil)
	}
}

// answerHeld answers, from n, every request left unanswered (h.unans),
// oldest first, and those they lead to; after, when set, runs after each.
func (h *harness) answerHeld(n *node, after func()) {
	for len(h.unans) > 0 {
		s := h.unans[0]
		h.unans = h.unans[1:]
		res, _ := n.answer(s)
		h.apply(h.m.Answer(s.ID, res, h.now), nil)
		if after != nil {
			after()
		}
	}
}

func (h *harness) collect(e Effects, live []byte) {
	h.pending = append(h.pending, e.Sends...)
	for _, d := range e.Deliveries {
		if d.Live {
			if live == nil {
				h.t.Fatalf("a Live delivery outside Push")
			}
			h.out = append(h.out, append([]byte(nil), live...))
			h.outKeys = append(h.outKeys, d.Key)
			continue
		}
		h.out = append(h.out, d.Result)
		h.outKeys = append(h.outKeys, d.Key)
	}
	h.heads += e.HeadsBackfilled
	h.logs += e.LogsBackfilled
	for _, g := range e.Gaps {
		// Compared by kind and reason; the whole Gap is in fullGaps.
		h.gaps = append(h.gaps, Gap{Kind: g.Kind, Reason: g.Reason})
		h.fullGaps = append(h.fullGaps, g)
	}
	h.durs += len(e.Durations)
}

func (h *harness) push(key string, result []byte) {
	h.apply(h.m.Push(key, pushParams(result), h.now), result)
}

func (h *harness) tick(d time.Duration) {
	h.now = h.now.Add(d)
	h.apply(h.m.Tick(h.now), nil)
}

// delivered returns what was delivered to key (to any key: ""), each as
// str describes it, or "?" and the result when str cannot.
func (h *harness) delivered(key string, str func([]byte) (string, bool)) []string {
	var s []string
	for i, r := range h.out {
		if key != "" && h.outKeys[i] != key {
			continue
		}
		if d, ok := str(r); ok {
			s = append(s, d)
		} else {
			s = append(s, "?"+string(r))
		}
	}
	return s
}

// deliveredHeads returns what was delivered as "n/hash-branch" for heads.
func (h *harness) deliveredHeads() []string {
	return h.delivered("", func(r []byte) (string, bool) {
		hd, ok := parseHeader(r)
		if !ok {
			return "", false
		}
		return headString(hd.num, hd.hash), true
	})
}

// headString is a head as the tests compare it: "n/hash-branch".
func headString(num uint64, hash string) string { return fmt.Sprintf("%d/%s", num, hash[2:18]) }

func headsOf(c map[uint64]blk, from, to uint64) []string {
	var s []string
	for n := from; n <= to; n++ {
		s = append(s, headString(n, c[n].hash))
	}
	return s
}
