package core

import (
	"errors"
	"slices"
	"time"

	"github.com/muxd/muxd/router"
)

// UpstreamFrame is the event of a frame read from connection gen. The
// shell scans it first, outside its lock: f and scanErr from
// router.ScanUpstream, or, for a large answer routed by its head, f holding
// the one message router.ScanResponseHead found. Responses are routed by id
// (layer 1), pushes by subscription id (layer 2); anything else is counted
// and dropped, an ambiguous message (router.ErrAmbiguous) as malformed:
// it is nobody's answer, and in an array the other elements are routed.
// Deliveries may borrow from frame (Delivery.Borrowed); the core itself
// keeps no reference to it once it returns.
func (c *Core) UpstreamFrame(e *Effects, gen uint64, frame []byte, f router.Frame, scanErr error, now time.Time) {
	e.Reset()
	defer c.finish(e)
	if gen != c.gen && gen == c.drain.gen {
		defer c.drained(e)
	}
	switch {
	case errors.Is(scanErr, router.ErrEmptyBatch):
		// Valid JSON, but no answer to anything.
		c.drop(e, DropUnexpected, "upstream sent an empty array", "gen", gen)
		return
	case scanErr != nil:
		c.drop(e, DropMalformed, "upstream sent a frame that is not valid JSON", "gen", gen, "bytes", len(frame))
		return
	}
	if f.Batch && len(f.Messages) > 1 && gen == c.gen && c.wholeBatch(e, frame, f.Messages, now) {
		return
	}
	// Only the one answer of a frame may take the buffer with it.
	lendable := !f.Batch && len(f.Messages) == 1
	arrayOfOne := f.Batch && len(f.Messages) == 1
	for i := range f.Messages {
		m := &f.Messages[i]
		switch {
		case m.Invalid != nil && errors.Is(m.Invalid, router.ErrAmbiguous):
			// Parsers differ on whose answer it is and what it says: the
			// request it may answer gets -32002 at its deadline, or the
			// node's next answer to it.
			c.drop(e, DropMalformed, "upstream sent a message that can be read more than one way; routed to no one", "gen", gen, "problem", m.Invalid)
		case m.HasID():
			c.response(e, gen, frame, m, lendable, arrayOfOne, now)
		case m.MethodIs(frame, methodSubscription):
			if gen == c.gen {
				c.push(e, frame, m, now)
			}
		default:
			c.drop(e, DropUnexpected, "upstream sent a message that is neither a response nor a subscription push", "gen", gen)
		}
	}
}

// errResponseTooLarge is what a request gets when the node's answer to it
// is past the shell's read limit (UpstreamTooLarge).
var errResponseTooLarge = router.ErrorLimit.Because("response too large")

// UpstreamTooLarge is the event of an answer from connection gen that the
// shell could not read whole: it was past the shell's read limit, and its
// first bytes carry upstream id uid (router.TruncatedResponseID), inArray
// when it is an element of an array. Every request it answers gets -32005
// "response too large", routed as the node's answer would have been (a
// coalesced call's joiners, a batch's slot, a subscription's setup): uid,
// or, when inArray and uid is a call of a client batch's upstream array,
// every call of that array still in flight (a node answers an array with
// one array, which any of them may come first in). Its deliveries borrow
// nothing.
func (c *Core) UpstreamTooLarge(e *Effects, gen, uid uint64, inArray bool, now time.Time) {
	uids, array := []uint64{uid}, false
	if inArray {
		uids, array = c.answeredBy(gen, uid, nil)
	}
	frame := make([]byte, 0, 64*len(uids)+2)
	if array {
		frame = append(frame, '[')
	}
	var idBuf [20]byte
	for i, id := range uids {
		if i > 0 {
			frame = append(frame, ',')
		}
		frame = router.AppendErrorResponse(frame, router.AppendUpstreamID(idBuf[:0], id), errResponseTooLarge)
	}
	if array {
		frame = append(frame, ']')
	}
	f, err := router.ScanUpstream(frame, nil)
	c.UpstreamFrame(e, gen, frame, f, err, now)
	for i := range e.Deliveries {
		// frame is this event's own: the deliveries may keep it.
		d := &e.Deliveries[i]
		d.Borrowed, d.Lendable, d.Off = false, false, 0
	}
	e.note("upstream answer past the read limit thrown away; its requests get -32005", "gen", gen, "requests", len(uids))
}

// answeredBy returns the upstream ids that an answer from connection gen
// carrying upstream id uid answers (UpstreamTooLarge): when uid is a call
// of a client batch's upstream array, the calls of that array still in
// flight, with array true; else uid.
func (c *Core) answeredBy(gen, uid uint64, dst []uint64) (uids []uint64, array bool) {
	if p, ok := c.reqs.Peek(uid); ok && p.Up != nil && (gen == c.gen || c.drain.answers(gen, uid)) {
		if uids = p.Up.InFlight(dst); len(uids) > 0 {
			return uids, true
		}
	}
	return append(dst, uid), false
}

// response is layer 1: the upstream id names the pending request; the
// client's own id goes back in its place. An answer to a single request is
// delivered as it lies in frame, with the splice left to the shell;
// lendable says it is the frame's only message. arrayOfOne says m came
// alone in an array, which is how a node refuses a whole batch.
func (c *Core) response(e *Effects, gen uint64, frame []byte, m *router.Message, lendable, arrayOfOne bool, now time.Time) {
	elem, idSpan := router.Element(frame, m)
	raw := idSpan.In(elem)
	if router.IsNull(raw) {
		c.drop(e, DropNullID, "upstream answered with id null (a protocol error on its side)", "gen", gen)
		return
	}
	uid, ok := router.ParseUpstreamID(raw)
	if !ok {
		c.drop(e, DropUnknownID, "upstream response with an id muxd never sent", "gen", gen)
		return
	}
	if gen != c.gen && !c.drain.answers(gen, uid) {
		if gen == c.drain.gen {
			// The draining connection answering what moved to the new
			// one: expected after a switch, not a fault to count.
			return
		}
		c.drop(e, DropUnknownID, "upstream response on a connection that is no longer current", "gen", gen)
		return
	}
	if k := c.coal.answered(uid); k != nil {
		if p, ok := c.reqs.Peek(uid); ok {
			c.roundTrip(gen, p, now) // the call sent, not those that joined it
		}
		c.learn(k.method, k.key, frame, m)
		c.callAnswered(e, k, frame, m, lendable, now)
		return
	}
	p, ok := c.reqs.Take(uid)
	if !ok {
		if o, ok := c.orphans.answered(uid); ok {
			// Expected whenever a client leaves with calls running:
			// counted, not logged. The node's work may still serve
			// others from the cache.
			c.keep(o.method, o.key, frame, m)
			c.obs.Dropped(DropClientGone)
			return
		}
		c.drop(e, DropUnknownID, "upstream response matches no pending request", "gen", gen, "id", uid)
		return
	}
	if p.Up != nil {
		c.arrayAnswered(e, uid, &p, frame, m, arrayOfOne, now)
	} else {
		c.roundTrip(gen, &p, now)
	}
	cl := c.settled(&p)
	switch p.Kind {
	case router.KindSubscribe:
		c.subscribeAnswered(e, frame, m, uid, &p, now)
		return
	case router.KindBackfill:
		c.backfillAnswered(e, frame, m, uid, now)
		return
	case router.KindFinalized:
		c.finalizedAnswered(frame, m, uid)
		return
	case router.KindUnsubscribe:
		return
	}
	c.learn(p.Method, p.Key, frame, m)
	if cl == nil {
		return
	}
	code := responseCode(frame, m)
	if p.Batch != nil {
		resp := router.AppendSpliced(make([]byte, 0, len(elem)-len(raw)+len(p.ID)), elem, idSpan, p.ID)
		c.answer(e, cl, &p, Delivery{Msg: resp}, code, now)
		return
	}
	c.answer(e, cl, &p, Delivery{Msg: elem, At: idSpan, ID: p.ID, Borrowed: true, Lendable: lendable, Off: m.Start}, code, now)
}

// arrayAnswered settles call uid of an upstream array, whose answer m has
// come, and sends the array next when this completes the one in flight.
// When the node refused the whole array (geth's "batch too large": one
// error, alone in an array, under the id of the array's first call), every
// other call of the array gets that same error, as the node wrote it,
// under its own id.
func (c *Core) arrayAnswered(e *Effects, uid uint64, p *router.Pending, frame []byte, m *router.Message, arrayOfOne bool, now time.Time) {
	// Only -32600 (invalid request) counts as refusing the array: a node
	// that answers each call in an array of its own is within JSON-RPC,
	// and the first call's ordinary error (a revert) must stay its own.
	code := responseCode(frame, m)
	if first, calls := p.Up.FirstInFlight(); arrayOfOne && first == uid && calls > 1 && code == router.CodeInvalidRequest {
		elem, idSpan := router.Element(frame, m)
		c.uids = p.Up.InFlight(c.uids[:0])
		for _, id := range c.uids {
			if id == uid {
				continue
			}
			q, ok := c.reqs.Take(id)
			if !ok {
				continue
			}
			if q.Up.Settle(id) {
				c.sendArrays(e, q.Up)
			}
			if cl := c.settled(&q); cl != nil {
				c.answer(e, cl, &q, Delivery{Msg: router.AppendSpliced(nil, elem, idSpan, q.ID)}, code, now)
			}
		}
	}
	if p.Up.Settle(uid) {
		c.sendArrays(e, p.Up)
	}
}

// wholeBatchMax is the largest array answer wholeBatch splices in one
// pass; larger ones go element by element.
const wholeBatchMax = 64 << 10

// wholeBatch is the fast path for the common case of a client batch: the
// node's array answer holds exactly the answers to one client batch,
// nothing of which has been answered otherwise. The ids are spliced in one
// pass into the client's array, in the order of the client's request
// (whatever order the node answered in), with no per-element copies and no
// re-assembly, and the batch's accounting is done once. It reports false,
// having changed nothing, when the case does not apply.
func (c *Core) wholeBatch(e *Effects, frame []byte, msgs []router.Message, now time.Time) bool {
	if len(frame) > wholeBatchMax {
		return false
	}
	// The ids, sorted, must all differ: a node that repeats an id gets
	// the element-by-element path, which drops the repeat.
	uids := c.uids[:0]
	for i := range msgs {
		m := &msgs[i]
		if !m.HasID() || m.Invalid != nil {
			return false
		}
		uid, ok := router.ParseUpstreamID(m.ID.In(frame))
		if !ok {
			return false
		}
		uids = append(uids, uid)
	}
	c.uids = uids
	slices.Sort(uids)
	for i := 1; i < len(uids); i++ {
		if uids[i] == uids[i-1] {
			return false
		}
	}
	b := c.oneUntouchedBatch(uids, len(msgs))
	if b == nil {
		return false
	}
	// order[slot] is the element answering the request element of that
	// slot, and its pending call: the batch's slots are 0 to n-1, one per
	// call (untouched, all n of its answers are here). The pointers stay
	// valid until TakeGroup below: nothing before it changes the table.
	order := c.order[:0]
	for range msgs {
		order = append(order, slotElem{msg: -1})
	}
	c.order = order
	for i := range msgs {
		uid, _ := router.ParseUpstreamID(msgs[i].ID.In(frame))
		p, _ := c.reqs.Peek(uid)
		if p.Slot < 0 || p.Slot >= len(order) || order[p.Slot].msg >= 0 {
			return false
		}
		order[p.Slot] = slotElem{i, p}
	}
	cl := c.clients[b.Client]
	first, _ := c.reqs.Peek(uids[0])
	up := first.Up
	for _, uid := range uids {
		if up.Settle(uid) {
			c.sendArrays(e, up)
		}
	}
	// The answer goes where the request array was laid out, when it
	// fits: that memory is free now.
	size := len(frame) + len(msgs)*(len(first.ID)+1) + 2
	out := up.AnswerRoom(size)
	if out == nil {
		out = make([]byte, 0, size)
	}
	out = append(out, '[')
	held := 0
	for k, o := range order {
		m, p := &msgs[o.msg], o.p
		elem, idSpan := router.Element(frame, m)
		// Only the Frame's length is read: its bytes may lie where out
		// is written.
		if k > 0 {
			out = append(out, ',')
		}
		held += len(p.Frame)
		c.learn(p.Method, p.Key, frame, m)
		code := responseCode(frame, m)
		c.answered(p, code, nodeOutcome(code), now)
		out = router.AppendSpliced(out, elem, idSpan, p.ID)
	}
	c.reqs.TakeGroup(uids[0])
	// Every call of a client batch is its client's (see settled).
	c.endedN(cl, len(msgs), held)
	b.Close()
	if cl != nil {
		msg := append(out, ']')
		e.deliver(cl, Delivery{Msg: msg, Arena: up.Arena(msg)})
	}
	// The group was the whole batch (oneUntouchedBatch), now taken: no
	// slot, waiting request or Pending points at up any more.
	c.batches.Put(up)
	return true
}

// slotElem is the element of an array answer that answers one slot of a
// client batch, and the call it answers (wholeBatch).
type slotElem struct {
	msg int
	p   *router.Pending
}

// oneUntouchedBatch returns the client batch whose pending calls are
// exactly uids (all different), n of them, when it expects exactly n
// answers and has none yet; else nil. The calls of one upstream array are
// one group of the pending table, which they all share Client, Kind and
// Batch with.
func (c *Core) oneUntouchedBatch(uids []uint64, n int) *router.Batch {
	g, live := c.reqs.Group(uids[0])
	if g == nil || live != n || g.Kind != router.KindCall || g.Batch == nil || g.Client == router.Internal {
		return nil
	}
	if b := g.Batch; b.Want() != n || !b.Untouched() || len(b.Subs) > 0 {
		return nil
	}
	for _, uid := range uids[1:] {
		if h, _ := c.reqs.Group(uid); h != g {
			return nil
		}
	}
	return g.Batch
}

// responseCode reads error.code from a response for the metrics; 0 for a
// result. frame is the whole frame m was scanned from.
func responseCode(frame []byte, m *router.Message) int {
	if !m.Error.Present() {
		return 0
	}
	code, ok := router.ErrorCode(m.Error.In(frame))
	if !ok {
		return -1
	}
	return code
}

// nodeOutcome is the outcome of a node's answer with error code code.
func nodeOutcome(code int) Outcome {
	if code != 0 {
		return OutcomeError
	}
	return OutcomeResult
}

// roundTrip counts how long connection gen took to answer p, a single
// request, from when it went upstream: its arrival, or the moment gen
// became current for one that waited for a connection or was sent again on
// this one.
func (c *Core) roundTrip(gen uint64, p *router.Pending, now time.Time) {
	if p.Sent.IsZero() {
		return
	}
	sent := p.Sent
	if gen == c.gen && c.since.After(sent) {
		sent = c.since
	}
	c.obs.RoundTrip(gen, now.Sub(sent))
}
