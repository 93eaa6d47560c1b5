package core

import (
	"container/list"
	"encoding/json"
	"strings"
	"time"

	"github.com/muxd/muxd/router"
)

// This file is the cache of answers that cannot change (Config.CacheBytes,
// least recently used first out). What is cached, by CallKey, and why it
// is safe (cacheRule):
//
//   - eth_chainId, net_version: a connection's node does not change chain.
//   - eth_getBlockByHash, eth_getBlockReceipts of a block hash, eth_getLogs
//     with a blockHash filter: a hash names one block for good, whatever
//     chain it ends up on, and a node keeps the blocks a reorg replaces.
//     It forgets them when its head is set back (geth's debug_setHead, a
//     test node's snapshot revert): a head below the last one evicts them
//     all.
//   - eth_getTransactionByHash, eth_getTransactionReceipt: only once mined
//     (blockHash not null), in a block the head view holds canonical; a
//     head that is not the child of the last (a reorg, or a jump) evicts
//     them all, since their block may be gone.
//   - eth_getBlockByNumber of a block number (never a tag: "latest",
//     "safe", "finalized", "pending", "earliest" name different blocks
//     over time), with or without its boolean: only when the number is at
//     or below the node's finalized block (finalized.go) when the answer
//     comes, which the chain's consensus keeps from changing. Should the
//     node say otherwise all the same, they go: a break in the heads
//     evicts those at or above the lowest block it may have replaced
//     (headChange.from), and a finalized block lower than before, or
//     another hash at the same number, evicts them all.
//
// Never cached: an error, a null result ("not found yet"), an answer over a
// quarter of the bound. The cache is emptied when the connection is lost:
// the next one may reach another node, even another chain. Answers go in
// as the node wrote them; a hit is that answer with the client's id
// spliced in, byte for byte.

// answerCache is a byte-bounded LRU of answers by CallKey.
type answerCache struct {
	max, bytes int
	byKey      map[string]*list.Element // of *cached
	lru        list.List                // most recently used first
	gone       []string                 // methods of the entries evicted since countEvictions
}

// cached is one answer: msg, the node's answer, with its id at at.
type cached struct {
	key    string
	method string
	msg    []byte
	at     router.Span
	scope  cacheScope
	number uint64 // the block number, for scopeFinalized
}

// cacheScope says how long a cached answer holds.
type cacheScope uint8

const (
	scopeNone       cacheScope = iota // never cached
	scopeConnection                   // as long as the connection
	scopeCanonical                    // while its block is canonical: evicted by any break in the heads
	scopeBlockHash                    // a block named by hash: evicted when the head goes back (headChange.back)
	scopeFinalized                    // a block by number, kept while at or below the finalized block
)

// size is what an entry counts against the bound: its bytes and a rough
// share for the map and list.
func (x *cached) size() int { return len(x.msg) + len(x.key) + 128 }

func newAnswerCache(max int) answerCache {
	return answerCache{max: max, byKey: map[string]*list.Element{}}
}

// get returns the answer under key, marking it used.
func (a *answerCache) get(key string) *cached {
	el := a.byKey[key]
	if el == nil {
		return nil
	}
	a.lru.MoveToFront(el)
	return el.Value.(*cached)
}

// put stores x, evicting the least recently used entries past the bound.
// An entry over a quarter of the bound is not stored.
func (a *answerCache) put(x *cached) {
	if x.size() > a.max/4 {
		return
	}
	if el := a.byKey[x.key]; el != nil {
		a.remove(el)
	}
	a.byKey[x.key] = a.lru.PushFront(x)
	a.bytes += x.size()
	for a.bytes > a.max {
		a.evict(a.lru.Back())
	}
}

// evict removes the entry at el and notes its method in gone.
func (a *answerCache) evict(el *list.Element) {
	a.gone = append(a.gone, el.Value.(*cached).method)
	a.remove(el)
}

func (a *answerCache) remove(el *list.Element) {
	x := a.lru.Remove(el).(*cached)
	delete(a.byKey, x.key)
	a.bytes -= x.size()
}

// evictWhere evicts every entry wrong says is wrong now.
func (a *answerCache) evictWhere(wrong func(*cached) bool) {
	for el := a.lru.Front(); el != nil; {
		next := el.Next()
		if wrong(el.Value.(*cached)) {
			a.evict(el)
		}
		el = next
	}
}

// clear evicts every entry.
func (a *answerCache) clear() {
	a.evictWhere(func(*cached) bool { return true })
}

// cacheRule says how long the answer to a call with key (a CallKey) may be
// cached, and for a block by number, its number.
func cacheRule(method, key string) (scope cacheScope, number uint64) {
	switch method {
	case "eth_chainId", "net_version":
		return scopeConnection, 0
	case "eth_getBlockByHash":
		return scopeBlockHash, 0
	case "eth_getTransactionByHash", "eth_getTransactionReceipt":
		return scopeCanonical, 0
	case "eth_getBlockReceipts":
		// A block hash, not a number or tag, and not the object form,
		// whose requireCanonical makes the answer depend on the chain.
		var ps []string
		if paramsOf(key, &ps) && len(ps) == 1 && isHash(ps[0]) {
			return scopeBlockHash, 0
		}
	case "eth_getLogs":
		var ps []map[string]json.RawMessage
		if !paramsOf(key, &ps) || len(ps) != 1 {
			return scopeNone, 0
		}
		_, byHash := ps[0]["blockHash"]
		_, from := ps[0]["fromBlock"]
		_, to := ps[0]["toBlock"]
		if byHash && !from && !to {
			return scopeBlockHash, 0
		}
	case "eth_getBlockByNumber":
		if n, ok := blockNumberParam(key); ok {
			return scopeFinalized, n
		}
	}
	return scopeNone, 0
}

// blockNumberParam reads the params of an eth_getBlockByNumber CallKey:
// a block number (a quantity, not a tag), then at most a boolean.
func blockNumberParam(key string) (uint64, bool) {
	var ps []json.RawMessage
	if !paramsOf(key, &ps) || len(ps) < 1 || len(ps) > 2 {
		return 0, false
	}
	var num string
	var full bool
	if json.Unmarshal(ps[0], &num) != nil || len(ps) == 2 && json.Unmarshal(ps[1], &full) != nil {
		return 0, false
	}
	return router.ParseQuantity(num)
}

// paramsOf decodes the params of a CallKey into v.
func paramsOf(key string, v any) bool {
	i := strings.IndexByte(key, 0)
	return i >= 0 && json.Unmarshal([]byte(key[i+1:]), v) == nil
}

// isHash reports whether s is a 32-byte hex hash ("0x" and 64 digits).
func isHash(s string) bool {
	if len(s) != 66 || s[:2] != "0x" {
		return false
	}
	for i := 2; i < len(s); i++ {
		if !isHexDigit(s[i]) {
			return false
		}
	}
	return true
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// CacheMethods are the methods whose answers the cache may keep (see
// cacheable), for the shell's metrics labels.
var CacheMethods = []string{"eth_chainId", "net_version", "eth_getBlockByHash", "eth_getTransactionByHash",
	"eth_getTransactionReceipt", "eth_getBlockReceipts", "eth_getLogs", "eth_getBlockByNumber"}

// cacheable reports whether method's answers may be cached now: with the
// cache on, and for blocks by number, a finalized block known. Keep it in
// step with CacheMethods.
func (c *Core) cacheable(method string) bool {
	if c.cache.max <= 0 {
		return false
	}
	switch method {
	case "eth_chainId", "net_version", "eth_getBlockByHash", "eth_getTransactionByHash",
		"eth_getTransactionReceipt", "eth_getBlockReceipts", "eth_getLogs":
		return true
	case "eth_getBlockByNumber":
		return c.fin.known
	}
	return false
}

// cacheRuleNow is cacheRule with what the core knows now: a block by
// number above the finalized block is not cached.
func (c *Core) cacheRuleNow(method, key string) (cacheScope, uint64) {
	scope, n := cacheRule(method, key)
	if scope == scopeFinalized && !c.fin.covers(n) {
		return scopeNone, 0
	}
	return scope, n
}

// cachedAnswer returns the cached answer to a request of method with key,
// counting a hit, or ok false, counting a miss when the answer could have
// been cached.
func (c *Core) cachedAnswer(method, key string) (x *cached, ok bool) {
	if !c.cacheable(method) {
		return nil, false
	}
	if scope, _ := c.cacheRuleNow(method, key); scope == scopeNone {
		return nil, false
	}
	if x = c.cache.get(key); x == nil {
		c.obs.CacheMiss(method)
		return nil, false
	}
	c.obs.CacheHit(method)
	return x, true
}

// keep caches the answer m in frame to a call with key and method, when the
// rules allow.
func (c *Core) keep(method, key string, frame []byte, m *router.Message) {
	if key == "" || !c.cacheable(method) || m.Error.Present() || !m.Result.Present() {
		return
	}
	result := m.Result.In(frame)
	if router.IsNull(result) {
		return
	}
	if method == "eth_getLogs" && string(result) == "[]" {
		// Most blocks have no matching log, but a node that has not
		// indexed a block's logs yet answers the same: not worth the
		// risk of serving it for the life of the connection.
		return
	}
	scope, n := c.cacheRuleNow(method, key)
	if scope == scopeNone || (scope == scopeCanonical && !c.minedCanonical(result)) {
		return
	}
	elem, idSpan := router.Element(frame, m)
	x := &cached{key: key, method: method, msg: append([]byte(nil), elem...), at: idSpan, scope: scope, number: n}
	c.cache.put(x)
	c.countEvictions()
}

// minedCanonical reports whether a transaction or receipt names a block
// (blockNumber, blockHash) that the head view holds canonical.
func (c *Core) minedCanonical(result []byte) bool {
	var r struct {
		BlockHash   *string `json:"blockHash"`
		BlockNumber *string `json:"blockNumber"`
	}
	if json.Unmarshal(result, &r) != nil || r.BlockHash == nil || r.BlockNumber == nil {
		return false
	}
	n, ok := router.ParseQuantity(*r.BlockNumber)
	return ok && c.heads.canonical(n, *r.BlockHash)
}

// headPushed feeds a head the node pushed to the head view: a break in
// the chain evicts what depended on it, and a new head asks the node for
// its finalized block.
func (c *Core) headPushed(e *Effects, params []byte, now time.Time) {
	h, ok := parseHeadPush(params)
	if !ok {
		return
	}
	if c.cfg.ReportHeads {
		e.Head = h.number
	}
	ch := c.heads.observe(h)
	if !ch.fresh {
		return
	}
	if ch.broken {
		c.cache.evictWhere(func(x *cached) bool {
			return x.scope == scopeCanonical || x.scope == scopeFinalized && x.number >= ch.from ||
				x.scope == scopeBlockHash && ch.back
		})
		c.countEvictions()
	}
	c.askFinalized(e, now)
}

// evictByNumber evicts every block cached by number.
func (c *Core) evictByNumber() {
	c.cache.evictWhere(func(x *cached) bool { return x.scope == scopeFinalized })
	c.countEvictions()
}

// countEvictions counts the entries evicted since it last ran, by method,
// and the bytes the cache holds now.
func (c *Core) countEvictions() {
	for _, method := range c.cache.gone {
		c.obs.CacheEvicted(method)
	}
	c.cache.gone = c.cache.gone[:0]
	c.obs.CacheBytes(c.cache.bytes)
}

// forgetConnection empties what belonged to the connection just lost: the
// calls in flight, the chain seen, the finalized block, the cache.
func (c *Core) forgetConnection() {
	c.coal.reset()
	c.heads.reset()
	c.fin = finalizedView{}
	c.cache.clear()
	c.countEvictions()
}
