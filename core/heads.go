package core

import (
	"bytes"
	"strings"

	"github.com/muxd/muxd/gapfill"
	"github.com/muxd/muxd/router"
)

// headView is what the core knows of the node's chain on the current
// connection, from the heads the node pushes to newHeads subscriptions
// (any client's) and the block numbers it answers to eth_blockNumber (how
// clients that poll learn of a block). Coalescing uses its epoch, the cache
// its recent canonical hashes and its reorgs.
type headView struct {
	// epoch counts the distinct heads seen: a request joins only a call
	// sent in the same epoch, so that a client that saw a new head and
	// then asks never gets an answer the node worked out before it.
	epoch uint64
	last  headSeen
	// highest is the highest block number seen, pushed or answered.
	highest uint64
	// hashes are the canonical hashes of the heads seen since the last
	// discontinuity (a reorg, a jump, a new connection), by number, at
	// most headWindow of them.
	hashes map[uint64]string
}

// headSeen is one head: its number, hash and parent hash.
type headSeen struct {
	number       uint64
	hash, parent string
}

// headWindow bounds the hashes a headView keeps.
const headWindow = 128

// isNewHeadsKey reports whether a subscription key is a newHeads one.
func isNewHeadsKey(key string) bool { return strings.HasPrefix(key, `["newHeads"`) }

// parseHeadPush reads number, hash and parentHash of the head pushed in
// params (an eth_subscription push's params object).
func parseHeadPush(params []byte) (headSeen, bool) {
	n, hash, parent, ok := gapfill.PushedHead(params)
	return headSeen{n, hash, parent}, ok
}

// headChange is what one head changed in a headView.
type headChange struct {
	fresh bool // a head not seen just before: the epoch moved
	// broken: the head is not the child of the last one (a reorg, or a
	// jump over heads the node did not push), which makes every
	// block-dependent answer suspect.
	broken bool
	// from is, for a break, the lowest block number it may have
	// replaced: the head's own number when its parent is a hash the view
	// holds canonical (a sibling, or a shorter chain), else 0 (the view
	// cannot tell how deep the break goes).
	from uint64
	// back: a break to a head below the last one (a rewind, as geth's
	// debug_setHead or a test node's snapshot revert, or a shorter
	// branch): blocks above it may be gone from the node altogether.
	back bool
}

// observe records head h and reports what it changed. A head seen just
// before changes nothing.
func (v *headView) observe(h headSeen) headChange {
	if v.hashes == nil {
		v.hashes = make(map[uint64]string)
	}
	if h.hash == v.last.hash {
		return headChange{}
	}
	v.epoch++
	ch := headChange{fresh: true}
	if v.last.hash != "" && (h.number != v.last.number+1 || h.parent != v.last.hash) {
		ch.broken = true
		ch.back = h.number < v.last.number
		if h.number > 0 && v.canonical(h.number-1, h.parent) {
			ch.from = h.number
		}
		clear(v.hashes)
	}
	v.hashes[h.number] = h.hash
	delete(v.hashes, h.number-headWindow)
	v.last = h
	if ch.back {
		v.highest = h.number // rewound: blocks above it are gone
	} else {
		v.highest = max(v.highest, h.number)
	}
	return ch
}

// sawBlockNumber records the block number in raw (a JSON string holding a
// quantity; anything else is ignored) that the node named in an answer or a
// log pushed: a client that does not subscribe to newHeads learns of a new
// block this way, so one above any seen moves the epoch, as a pushed head
// does.
func (v *headView) sawBlockNumber(raw []byte) {
	if n, ok := router.ParseQuantityJSON(raw); ok && n > v.highest {
		v.highest = n
		v.epoch++
	}
}

// sawHeadNumber records the head's block number in raw (as sawBlockNumber),
// which the node answered to eth_blockNumber: any change moves the epoch,
// a lower one too (the node's head set back, or a reorg to a shorter
// chain: the blocks above it are gone, and the ones that replace them are
// new). An answer the node worked out before another but sent after it
// also counts as a change: one epoch too many only costs a join.
func (v *headView) sawHeadNumber(raw []byte) {
	if n, ok := router.ParseQuantityJSON(raw); ok && n != v.highest {
		v.highest = n
		v.epoch++
	}
}

// canonical reports whether block number n with hash hash is on the chain
// as the heads seen since the last discontinuity show it.
func (v *headView) canonical(n uint64, hash string) bool {
	h, ok := v.hashes[n]
	return ok && h == strings.ToLower(hash)
}

// reset forgets the chain, as when the connection is lost: the next one
// may reach another node. The epoch goes on counting.
func (v *headView) reset() {
	clear(v.hashes)
	v.last = headSeen{}
	v.highest = 0
	v.epoch++
}

// learn takes from the node's answer m in frame, to a call of method (key
// its CallKey), what it teaches the core: an answer to keep (cache) and a
// block it names (noteBlockNumber).
func (c *Core) learn(method, key string, frame []byte, m *router.Message) {
	c.keep(method, key, frame, m)
	c.noteBlockNumber(method, key, frame, m)
}

// noteBlockNumber moves the head view (sawBlockNumber) when m, the node's
// answer in frame to a call of method (key its CallKey), names a block: the
// number an eth_blockNumber answers, a block's own number, the block of a
// transaction or receipt, the last block of an eth_getLogs. Each is a way a
// client that does not subscribe learns of a new block before asking about
// it. A pending block (not yet a block of the chain) names none.
func (c *Core) noteBlockNumber(method, key string, frame []byte, m *router.Message) {
	if len(c.coalesce) == 0 || !m.Result.Present() {
		return // the epoch serves coalescing only
	}
	result := m.Result.In(frame)
	var raw []byte
	switch method {
	case "eth_blockNumber":
		c.heads.sawHeadNumber(result)
		return
	case "eth_getBlockByNumber", "eth_getBlockByHash":
		if strings.Contains(key, `"pending"`) {
			return
		}
		raw = memberValue(result, `"number":`, false)
	case "eth_getTransactionReceipt", "eth_getTransactionByHash", "eth_getBlockReceipts",
		"eth_getTransactionByBlockHashAndIndex", "eth_getTransactionByBlockNumberAndIndex":
		raw = memberValue(result, `"blockNumber":`, false)
	case "eth_getLogs", "eth_getFilterChanges", "eth_getFilterLogs":
		// Logs come in block order; a block filter's hashes name no
		// number and move nothing.
		raw = memberValue(result, `"blockNumber":`, true)
	default:
		return
	}
	c.heads.sawBlockNumber(raw)
}

// memberValue returns the JSON string value that follows the first (or
// last) occurrence of name (a member name with its colon, as nodes write
// it: no space) in result, or nil. It looks only at bytes, without
// scanning the answer: a block's "number" is the only member of that name
// in it (its transactions and logs have "blockNumber"; geth writes members
// in name order, so it is found before the transactions), and a
// transaction's or receipt's "blockNumber" is the block its logs name too.
func memberValue(result []byte, name string, last bool) []byte {
	i := bytes.Index(result, []byte(name))
	if last {
		i = bytes.LastIndex(result, []byte(name))
	}
	if i < 0 {
		return nil
	}
	v := result[i+len(name):]
	if len(v) < 2 || v[0] != '"' {
		return nil
	}
	end := bytes.IndexByte(v[1:], '"')
	if end < 0 {
		return nil
	}
	return v[:end+2]
}
