package core

import (
	"strings"
	"time"

	"github.com/muxd/muxd/router"
)

// This file is coalescing: a single request whose method is on
// Config.CoalesceMethods and whose CallKey (method and canonical params)
// equals that of a call already in flight on the current connection joins
// that call instead of going upstream. The node's one answer then goes to
// every waiter, each under its own id.
//
// Each waiter is an ordinary entry of the pending table, under an upstream
// id of its own that was never sent, with its own frame, deadline and
// client: limits, deadlines (Tick), a client leaving (ClientGone) and the
// connection's loss (UpstreamLost: retried or failed by method, then
// coalesced again on the next connection) treat it exactly as a request
// sent alone. The table here only remembers which entries wait on which
// sent id. A call whose lead (the request that was sent) times out or
// leaves stays in flight for the others: its answer still comes under the
// lead's id. A call ends when its answer comes or its last waiter is gone,
// whichever is first; an answer after that is dropped as unknown.
//
// A request joins only a call sent in the same head epoch (headView), with
// no state change answered since (changesState), and before the lead's
// deadline: one that saw a new head, or the answer to a transaction sent
// through muxd (its own, or one another client may have told it of), never
// gets an answer worked out before it, and a call the node never answers
// cannot keep absorbing requests. Elements of a client batch neither lead
// nor join: a batch goes upstream as arrays of its own
// (router.UpstreamBatch).

// DefaultCoalesceMethods are the read-only methods that carry no client
// state: identical requests of these may share one upstream call.
// Filters, transactions, subscriptions and anything with side effects are
// not among them.
var DefaultCoalesceMethods = []string{
	"eth_chainId", "net_version", "eth_blockNumber", "eth_gasPrice", "eth_maxPriorityFeePerGas",
	"eth_getBlockByNumber", "eth_getBlockByHash", "eth_getBlockReceipts", "eth_getTransactionByHash",
	"eth_getTransactionReceipt", "eth_getLogs", "eth_call", "eth_getBalance", "eth_getCode",
	"eth_getStorageAt", "eth_getTransactionCount", "eth_feeHistory",
}

// maxKeyedParams bounds the params of a request that may be coalesced or
// cached: keying one costs a pass over its params and a copy of them.
const maxKeyedParams = 16 << 10

// callKey returns the CallKey of request m in frame when it may be
// coalesced (a single request) or cached, else "". inBatch says m is an
// element of a client batch. Keying reads the params under the shell's
// lock, and the key is held as long as the request: params over
// maxKeyedParams go without one.
func (c *Core) callKey(frame []byte, m *router.Message, method string, inBatch bool) string {
	if (inBatch || !c.coalesce[method]) && !c.cacheable(method) {
		return ""
	}
	var params []byte
	if m.Params.Present() {
		params = m.Params.In(frame)
	}
	if len(params) > maxKeyedParams {
		return ""
	}
	key, err := router.CallKey(method, params)
	if err != nil {
		return ""
	}
	return key
}

// coalesceTable is the calls of the current connection that requests may
// join. It is emptied when the connection is lost.
type coalesceTable struct {
	byKey  map[string]*call // the call a request with this key joins
	calls  map[uint64]*call // by the upstream id it was sent under
	waiter map[uint64]*call // every waiter's upstream id, the lead's included
	// changes counts the answers muxd has given to calls that may have
	// changed what reads return (changesState); never reset.
	changes uint64
}

// call is one upstream call and the requests waiting on its answer.
type call struct {
	uid     uint64 // the upstream id it went under: the lead's
	key     string // its CallKey
	method  string
	waiters []uint64 // upstream ids of the requests waiting, in arrival order, lead first
	live    int      // waiters still waiting
	joinBy  time.Time
	epoch   uint64
	changes uint64 // coalesceTable.changes when it was sent
}

func newCoalesceTable() coalesceTable {
	return coalesceTable{byKey: map[string]*call{}, calls: map[uint64]*call{}, waiter: map[uint64]*call{}}
}

// lead records a call of method sent under uid, which requests with key may join
// until joinBy, in head epoch epoch.
func (t *coalesceTable) lead(uid uint64, key, method string, joinBy time.Time, epoch uint64) {
	k := &call{uid: uid, key: key, method: method, waiters: []uint64{uid}, live: 1, joinBy: joinBy, epoch: epoch, changes: t.changes}
	t.byKey[key] = k
	t.calls[uid] = k
	t.waiter[uid] = k
}

// find returns the call a request with key may join at now in epoch, or
// nil.
func (t *coalesceTable) find(key string, now time.Time, epoch uint64) *call {
	k := t.byKey[key]
	if k == nil || k.epoch != epoch || k.changes != t.changes || !now.Before(k.joinBy) {
		return nil
	}
	return k
}

// join adds the waiter with upstream id uid to k.
func (t *coalesceTable) join(k *call, uid uint64) {
	k.waiters = append(k.waiters, uid)
	k.live++
	t.waiter[uid] = k
}

// left accounts for waiter uid leaving the pending table otherwise than by
// its call's answer (a deadline, its client gone); the call ends with its
// last waiter. A uid that waits on no call changes nothing.
func (t *coalesceTable) left(uid uint64) {
	k := t.waiter[uid]
	if k == nil {
		return
	}
	delete(t.waiter, uid)
	if k.live--; k.live == 0 {
		t.end(k)
	}
}

// answered ends the call sent under uid and returns it (nil when uid is no
// call's): its waiters still in the pending table get the answer.
func (t *coalesceTable) answered(uid uint64) *call {
	k := t.calls[uid]
	if k == nil {
		return nil
	}
	for _, w := range k.waiters {
		delete(t.waiter, w)
	}
	t.end(k)
	return k
}

// end forgets k.
func (t *coalesceTable) end(k *call) {
	delete(t.calls, k.uid)
	if t.byKey[k.key] == k {
		delete(t.byKey, k.key)
	}
}

// reset forgets every call, as when the connection is lost.
func (t *coalesceTable) reset() {
	clear(t.byKey)
	clear(t.calls)
	clear(t.waiter)
}

// stateChanged records that muxd answered a call that may have changed
// what reads return: no request joins a call sent before it.
func (t *coalesceTable) stateChanged() { t.changes++ }

// changesState reports whether a successful call of method may change
// what the coalesced reads return without a new head: a transaction sent
// into the node's pool (eth_send*, personal_send*: the pending nonce and
// balance, eth_getTransactionByHash), or a test node's own state changes
// (evm_*, anvil_*, hardhat_*, ganache_*, miner_*, debug_set*: mining,
// snapshots, balances set by hand). Filters and subscriptions do not
// change what other calls return.
func changesState(method string) bool {
	if method == "" {
		return false
	}
	for _, prefix := range stateChangingPrefixes[method[0]] {
		if strings.HasPrefix(method, prefix) {
			return true
		}
	}
	return false
}

// stateChangingPrefixes are changesState's method prefixes by first letter:
// it runs for every answer.
var stateChangingPrefixes = [256][]string{
	'e': {"eth_send", "evm_"},
	'p': {"personal_send"},
	'a': {"anvil_"},
	'h': {"hardhat_"},
	'g': {"ganache_"},
	'm': {"miner_"},
	'd': {"debug_set"},
}

// joined is how many requests in the pending table wait on another's call
// (they sent nothing upstream). It walks the calls.
func (t *coalesceTable) joined() int {
	n := len(t.waiter)
	for uid := range t.calls {
		if t.waiter[uid] != nil {
			n-- // the lead still waits: its frame was sent
		}
	}
	return n
}

// forward sends single request p (upstream id uid) on the current
// connection, or has it join an identical call in flight, and records it
// in the pending table either way.
func (c *Core) forward(e *Effects, uid uint64, p router.Pending, now time.Time) {
	c.reqs.Add(uid, p)
	c.launch(e, uid, &p, time.Time{}, now)
}

// launch sends single request p (upstream id uid), in the pending table
// already, or has it join an identical call in flight. sent is when it
// leaves a fair-share queue (zero: as it arrived).
func (c *Core) launch(e *Effects, uid uint64, p *router.Pending, sent, now time.Time) {
	if p.Key != "" && p.Kind == router.KindCall && c.coalesce[p.Method] {
		if k := c.coal.find(p.Key, now, c.heads.epoch); k != nil {
			c.coal.join(k, uid)
			c.obs.Coalesced(p.Method)
			return
		}
		c.coal.lead(uid, p.Key, p.Method, p.Deadline, c.heads.epoch)
	}
	if p.Kind == router.KindCall && p.Client != router.Internal {
		c.tookSlot(uid, sent, now)
	}
	c.send(e, p.Frame)
}

// callAnswered delivers the answer m to call k to each of its waiters still
// waiting, under its own id.
func (c *Core) callAnswered(e *Effects, k *call, frame []byte, m *router.Message, lendable bool, now time.Time) {
	elem, idSpan := router.Element(frame, m)
	code := responseCode(frame, m)
	// Only the one delivery of a frame may take the buffer with it.
	lendable = lendable && len(k.waiters) == 1
	for _, uid := range k.waiters {
		p, ok := c.reqs.Take(uid)
		if !ok {
			continue // timed out, or its client left
		}
		if cl := c.settled(&p); cl != nil {
			c.answer(e, cl, &p, Delivery{Msg: elem, At: idSpan, ID: p.ID, Borrowed: true, Lendable: lendable, Off: m.Start}, code, now)
		}
	}
}
