package core

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/muxd/muxd/gapfill"
	"github.com/muxd/muxd/router"
)

// This file serves history subscriptions: eth_subscribe("logs", {...,
// fromBlock: B[, toBlock: T]}) and muxd's extension eth_subscribe
// ("newHeads", {fromBlock: B}). Such a subscription is a member of the key
// of its params without the range (router.SplitSubscribeRange), so it
// shares the node's one live subscription with every plain subscription
// of the same filter, and every other history subscription of it. It is
// left out of the key's fanout: it has a key of its own in the gap
// machine (gapfill/history.go), fed the key's pushes, whose deliveries go
// to it alone: its history, then the live pushes, gap-free and once each
// across the seam.
//
// Before the client gets its subscription id, muxd asks the node for its
// head (eth_blockNumber), refuses with -32602 a fromBlock above it or a
// history longer than HistoryBlocks, and for logs asks the node for the
// filter's logs of block B alone, so that a node that has pruned that
// history answers the eth_subscribe with its own error. The history
// starts once the key is live upstream (so that no block falls between
// the history and the first push), right after the client's answer.

// histSub is what a history subscription adds to its member.
type histSub struct {
	key     string // its key in the gap machine, once started
	heads   bool   // newHeads (else logs)
	from    uint64
	to      uint64 // with hasTo: the last block delivered
	hasTo   bool
	head    uint64 // the node's head when the subscription was checked
	started bool   // its machine key runs
	done    bool   // past toBlock: silent until unsubscribed
}

// histCheck is a history eth_subscribe waiting for the node: its head,
// then (logs) the probe of its first block.
type histCheck struct {
	cl       *client
	p        router.Pending
	stripped []byte // the params without the range
	key      string
	rng      router.SubscribeRange
	heads    bool
	probe    bool   // the head is known: this is the probe's answer
	head     uint64 // the node's head, once known
}

// Reasons a history subscription is refused, for Observer.HistoryRefused.
const (
	HistoryRefusedMalformed = "malformed"   // the range cannot be read or is off
	HistoryRefusedTooLong   = "too_long"    // more blocks than HistoryBlocks
	HistoryRefusedAboveHead = "above_head"  // fromBlock above the node's head
	HistoryRefusedNode      = "node_error"  // the node's error passed on (pruned history…)
	HistoryRefusedNoUp      = "no_upstream" // no connection to ask the head on
)

func historyError(reason string) router.RPCError {
	return router.RPCError{Code: -32602, Message: "invalid params", Reason: reason}
}

// subscribeHistory handles an eth_subscribe whose fromBlock is a block
// number. It answers at once only with an error.
func (c *Core) subscribeHistory(e *Effects, cl *client, stripped []byte, rng router.SubscribeRange, perr error, p router.Pending) []byte {
	refuse := func(why string, err router.RPCError) []byte {
		c.obs.HistoryRefused(why)
		return c.errorBytes(p.Method, p.ID, err)
	}
	if perr != nil {
		return refuse(HistoryRefusedMalformed, historyError(perr.Error()))
	}
	if c.cfg.HistoryBlocks <= 0 || !c.gap.Enabled() {
		return refuse(HistoryRefusedMalformed, historyError("fromBlock history is off on this muxd (history_blocks or backfill_blocks is 0)"))
	}
	key, err := router.SubscriptionKey(stripped)
	if err != nil {
		return refuse(HistoryRefusedMalformed, invalidParams)
	}
	if len(cl.subs) >= c.cfg.MaxSubscriptions {
		c.obs.Limit("subscriptions")
		return c.errorBytes(p.Method, p.ID, router.ErrorLimit.Because("too many subscriptions"))
	}
	if c.gen == 0 {
		return refuse(HistoryRefusedNoUp, router.ErrorUnavailable.Because("no upstream connected to read the head from"))
	}
	hc := &histCheck{cl: cl, p: p, stripped: append([]byte(nil), stripped...), key: key, rng: rng, heads: key == `["newHeads"]`}
	c.historyAsk(e, hc, "eth_blockNumber", []byte("[]"), p.Sent)
	c.started(cl, 0)
	return nil
}

// historyAsk sends one of a history check's requests, as muxd's own.
func (c *Core) historyAsk(e *Effects, hc *histCheck, method string, params []byte, now time.Time) {
	if c.histChecks == nil {
		c.histChecks = map[uint64]*histCheck{}
	}
	uid := c.internalRequest(e, router.KindBackfill, method, params, hc.key, now.Add(c.gapTimeout), now)
	c.histChecks[uid] = hc
	c.obs.HistoryRequests(1)
}

// historyAnswered takes the node's answer to a history check's request
// uid; it reports false when uid is none.
func (c *Core) historyAnswered(e *Effects, frame []byte, m *router.Message, uid uint64, now time.Time) bool {
	hc, ok := c.histChecks[uid]
	if !ok {
		return false
	}
	delete(c.histChecks, uid)
	cl := hc.cl
	if c.clients[cl.id] != cl {
		return true // gone: ClientGone counted it
	}
	if !m.Result.Present() || m.Error.Present() {
		// The node's own words (a pruned history, a range it will not
		// serve), under the client's id.
		c.obs.HistoryRefused(HistoryRefusedNode)
		elem := frame[m.Start:m.End]
		resp := router.AppendSpliced(nil, elem, rebase(m.ID, m.Start), hc.p.ID)
		c.answer(e, cl, &hc.p, Delivery{Msg: resp}, responseCode(frame, m), now)
		c.ended(cl, 0)
		return true
	}
	if !hc.probe {
		head, ok := router.ParseQuantityJSON(m.Result.In(frame))
		if !ok {
			c.historyRefuse(e, hc, HistoryRefusedNode, router.ErrorUnavailable.Because("the node's head could not be read"), now)
			return true
		}
		hc.head = head
		if why, err := c.historyBound(hc, head); why != "" {
			c.historyRefuse(e, hc, why, err, now)
			return true
		}
		if !hc.heads {
			hc.probe = true
			c.historyAsk(e, hc, "eth_getLogs", probeParams(hc.stripped, hc.rng.From), now)
			return true
		}
	}
	c.ended(cl, 0)
	c.attachHistory(e, hc, now)
	return true
}

// historyBound says why a history of hc's range cannot be served with the
// node at head (a Refused reason and the error), or "".
func (c *Core) historyBound(hc *histCheck, head uint64) (string, router.RPCError) {
	from := hc.rng.From
	if from > head {
		return HistoryRefusedAboveHead, historyError("fromBlock " + quantity(from) + " is above the node's head " + quantity(head))
	}
	end := head
	if hc.rng.HasTo && hc.rng.To < end {
		end = hc.rng.To
	}
	if n := end - from + 1; n > uint64(c.cfg.HistoryBlocks) {
		return HistoryRefusedTooLong, historyError("the history asked for is " + strconv.FormatUint(n, 10) + " blocks, more than history_blocks (" + strconv.Itoa(c.cfg.HistoryBlocks) + ")")
	}
	return "", router.RPCError{}
}

func quantity(n uint64) string { return "0x" + strconv.FormatUint(n, 16) }

// historyRefuse answers hc's eth_subscribe with muxd's error err.
func (c *Core) historyRefuse(e *Effects, hc *histCheck, why string, err router.RPCError, now time.Time) {
	c.obs.HistoryRefused(why)
	c.answerOwn(e, hc.cl, &hc.p, err, now)
	c.ended(hc.cl, 0)
}

// historyExpired answers the client of a history check whose request uid
// timed out (or was lost with its connection); it reports false when uid
// is none.
func (c *Core) historyExpired(e *Effects, uid uint64, why string, now time.Time) bool {
	hc, ok := c.histChecks[uid]
	if !ok {
		return false
	}
	delete(c.histChecks, uid)
	if c.clients[hc.cl.id] == hc.cl {
		c.historyRefuse(e, hc, HistoryRefusedNoUp, router.ErrorUnavailable.Because(why), now)
	}
	return true
}

// historyLost answers every history check in flight: their connection is
// gone.
func (c *Core) historyLost(e *Effects, now time.Time) {
	for uid := range c.histChecks {
		c.historyExpired(e, uid, "connection lost while the history was checked", now)
	}
}

// probeParams are eth_getLogs params for the filter of stripped (["logs",
// {...}]) in block n alone.
func probeParams(stripped []byte, n uint64) []byte {
	var v []json.RawMessage
	f := map[string]json.RawMessage{}
	if json.Unmarshal(stripped, &v) == nil && len(v) > 1 {
		_ = json.Unmarshal(v[1], &f)
	}
	if f == nil {
		f = map[string]json.RawMessage{}
	}
	q := json.RawMessage(strconv.Quote(quantity(n)))
	f["fromBlock"], f["toBlock"] = q, q
	b, _ := json.Marshal([]any{f})
	return b
}

// attachHistory makes hc's client a member of its key, as subscribe does,
// its history to start once the key is live.
func (c *Core) attachHistory(e *Effects, hc *histCheck, now time.Time) {
	cl := hc.cl
	if len(cl.subs) >= c.cfg.MaxSubscriptions {
		c.obs.Limit("subscriptions")
		c.answerOwn(e, cl, &hc.p, router.ErrorLimit.Because("too many subscriptions"), now)
		return
	}
	size := len(hc.key) + len(hc.stripped)
	if c.overHeld(cl, size) {
		c.answerOwn(e, cl, &hc.p, errHeldBytes, now)
		return
	}
	mem := c.join(e, cl, hc.key, hc.stripped, size, hc.p, func(mem *member) {
		mem.hist = &histSub{heads: hc.heads, from: hc.rng.From, to: hc.rng.To, hasTo: hc.rng.HasTo, head: hc.head}
	}, now)
	if mem.req == nil && mem.sh.state == keyLive {
		c.startHistory(e, mem, now)
	}
}

// startHistory starts mem's history in the gap machine: its key is live.
func (c *Core) startHistory(e *Effects, mem *member, now time.Time) {
	h := mem.hist
	if h == nil || h.started || h.done {
		return
	}
	h.started = true
	h.key = mem.sh.key + "#" + mem.id
	if c.hist == nil {
		c.hist = map[string]*member{}
		c.histBounded = map[*member]struct{}{}
	}
	c.hist[h.key] = mem
	if h.hasTo {
		c.histBounded[mem] = struct{}{}
	}
	var g gapfill.Effects
	var end uint64 // a toBlock the node had reached when asked: only that far
	if h.hasTo && h.to <= h.head {
		end = h.to
	}
	if h.heads {
		g = c.gap.HistoryHeads(h.key, h.from, end, now)
	} else {
		g = c.gap.History(h.key, mem.sh.key, h.from, end, now)
	}
	c.applyGap(e, g, nil, now)
}

// historyLive starts the histories of sh's members, or has the machine
// take their keys as live again (a resubscribe after a reconnect: what
// they missed is backfilled).
func (c *Core) historyLive(e *Effects, sh *shared, now time.Time) {
	for i := 0; i < len(sh.members); i++ {
		mem := sh.members[i]
		switch h := mem.hist; {
		case h == nil || h.done:
		case !h.started:
			c.startHistory(e, mem, now)
		default:
			c.applyGap(e, c.gap.Live(h.key, now), nil, now)
		}
	}
}

// pushHistory feeds a push for sh to the machine keys of its history
// members.
func (c *Core) pushHistory(e *Effects, sh *shared, params []byte, live *sharedPush, now time.Time) {
	for i := 0; i < len(sh.members); i++ {
		mem := sh.members[i]
		if h := mem.hist; h != nil && h.started && !h.done {
			c.applyGap(e, c.gap.Push(h.key, params, now), live, now)
		}
	}
}

// deliverHistory delivers a machine delivery for history member mem: the
// push of the event (live) or a result the machine built. A log past
// toBlock is not delivered.
func (c *Core) deliverHistory(e *Effects, mem *member, d gapfill.Delivery, live *sharedPush) {
	var p sharedPush
	if d.Live {
		if live == nil {
			return
		}
		p = *live
	} else {
		p.msg, p.at = gapPushFrame(d.Result)
	}
	if h := mem.hist; h.hasTo {
		field := `"blockNumber":`
		if h.heads {
			field = `"number":`
		}
		if n, ok := router.ParseQuantityJSON(memberValue(p.msg, field, false)); ok && n > h.to {
			return
		}
	}
	c.deliverTo(e, mem, p)
}

// deliverTo queues push p for mem alone, as fanout does for each member.
func (c *Core) deliverTo(e *Effects, mem *member, p sharedPush) {
	if c.pushTo(e, mem, p) {
		c.obs.Pushed(1)
	}
}

// historyBounds ends the history subscriptions whose toBlock every log up
// to was delivered: from then on they are silent.
func (c *Core) historyBounds() {
	for mem := range c.histBounded {
		h := mem.hist
		if cov, ok := c.gap.Covered(h.key); ok && cov >= h.to {
			c.endHistory(mem)
			h.done = true
		}
	}
}

// endHistory forgets mem's machine key.
func (c *Core) endHistory(mem *member) {
	h := mem.hist
	if h == nil || !h.started {
		return
	}
	c.gap.Forget(h.key)
	delete(c.hist, h.key)
	delete(c.histBounded, mem)
}
