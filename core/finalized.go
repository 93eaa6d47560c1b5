package core

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/muxd/muxd/router"
)

// This file tracks the node's finalized block on the current connection,
// which lets the cache keep blocks by number (cache.go). On each new head
// the node pushes (headView: a newHeads subscription must be live, any
// client's), the core asks the node itself for
// eth_getBlockByNumber(["finalized",false]), as muxd's own request
// (router.KindFinalized) with the backfill requests' deadline. At most one
// is in flight: a head that comes while one is asks nothing, and the next
// head asks again. One call per head is little next to what the clients
// ask on each head, and the finalized block moves only every few heads
// (32 on Ethereum), so the cache lags it by at most the one head.
//
// The answer's number and hash are what the cache goes by. A finalized
// block lower than before, or another hash at the same number, evicts
// every block cached by number. An error or a null (a node before the
// merge, some dev chains) means the node has no finalized block: nothing
// is cached by number, and what was goes. A request that times out
// changes nothing. The connection's loss forgets it all: the next one may
// reach another node.

// methodGetBlockByNumber is the method muxd asks the finalized block with.
const methodGetBlockByNumber = "eth_getBlockByNumber"

// finalizedParams are the params of that request.
var finalizedParams = []byte(`["finalized",false]`)

// finalizedView is the node's finalized block as last answered.
type finalizedView struct {
	known  bool
	number uint64
	hash   string
	asking uint64 // the upstream id of the request in flight; 0: none
}

// covers reports whether block number n is at or below the finalized
// block.
func (f *finalizedView) covers(n uint64) bool { return f.known && n <= f.number }

// askFinalized sends the request for the finalized block, unless one is in
// flight, the cache is off, or there is no connection.
func (c *Core) askFinalized(e *Effects, now time.Time) {
	if c.gen == 0 || c.fin.asking != 0 || c.cache.max <= 0 {
		return
	}
	c.fin.asking = c.internalRequest(e, router.KindFinalized, methodGetBlockByNumber, finalizedParams, "", now.Add(c.gapTimeout), now)
}

// finalizedAnswered records the node's answer m to the request for the
// finalized block sent under uid.
func (c *Core) finalizedAnswered(frame []byte, m *router.Message, uid uint64) {
	if uid != c.fin.asking {
		return
	}
	c.fin.asking = 0
	var b struct {
		Number string `json:"number"`
		Hash   string `json:"hash"`
	}
	var n uint64
	ok := !m.Error.Present() && m.Result.Present() && json.Unmarshal(m.Result.In(frame), &b) == nil && b.Hash != ""
	if ok {
		n, ok = router.ParseQuantity(b.Number)
	}
	if !ok {
		// No finalized block: nothing stays cached by number.
		if c.fin.known {
			c.evictByNumber()
		}
		c.fin.known, c.fin.number, c.fin.hash = false, 0, ""
		return
	}
	hash := strings.ToLower(b.Hash)
	if c.fin.known && (n < c.fin.number || n == c.fin.number && hash != c.fin.hash) {
		c.evictByNumber()
	}
	c.fin.known, c.fin.number, c.fin.hash = true, n, hash
}
