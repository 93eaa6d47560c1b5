package core

import (
	"bytes"
	"errors"
	"strings"
	"time"

	"github.com/muxd/muxd/router"
)

// ClientFrame is the event of a frame from client id. The shell scans it
// first, outside its lock (router.ScanClient gives f and scanErr), and the
// core then answers what muxd answers itself (parse errors, invalid
// requests, policy, limits), sends every well-formed request upstream under
// a fresh id (or holds it until an upstream is up), and arranges for batch
// answers to be re-assembled. It reports whether an answer will be sent
// (false for notifications only), for HTTP, which must answer an empty 200
// then. The core keeps no reference to frame once it returns.
func (c *Core) ClientFrame(e *Effects, id router.ClientID, frame []byte, f router.Frame, scanErr error, now time.Time) (answers bool) {
	e.Reset()
	cl := c.clients[id]
	if cl == nil {
		return false
	}
	switch {
	case errors.Is(scanErr, router.ErrParse):
		c.reply(e, cl, nil, router.ErrorParse)
		return true
	case errors.Is(scanErr, router.ErrEmptyBatch):
		c.reply(e, cl, nil, router.ErrorEmptyBatch)
		return true
	case scanErr != nil:
		c.reply(e, cl, nil, router.ErrorInvalidRequest)
		return true
	}
	if f.Batch && len(f.Messages) > c.cfg.MaxBatch {
		c.obs.Limit("batch_size")
		c.reply(e, cl, nil, router.ErrorLimit.Because("batch too large"))
		return true
	}
	var b *router.Batch
	if f.Batch {
		want := 0
		for i := range f.Messages {
			if m := &f.Messages[i]; m.HasID() || m.Invalid != nil {
				want++
			}
		}
		if want > 0 {
			b = router.NewBatch(cl.id, want)
		}
	}
	return c.admitAll(e, cl, frame, f.Messages, b, f.Batch, now)
}

// admitAll handles the messages of one frame. b re-assembles the answers of
// a batch (nil for a single message and for a batch of notifications
// only); batch says the frame is a batch, whose forwarded elements go
// upstream as one array. It reports whether an answer will come.
func (c *Core) admitAll(e *Effects, cl *client, frame []byte, msgs []router.Message, b *router.Batch, batch bool, now time.Time) bool {
	var (
		up      *router.UpstreamBatch
		expect  bool
		answers []slotAnswer // muxd's own answers to batch elements
		slot    int          // the next answered element's place in b
	)
	var memo methodMemo
	if batch {
		idLen := 0
		for i := range msgs {
			idLen += msgs[i].ID.Len
		}
		up = c.batches.New(len(frame), len(msgs), idLen)
	}
	for i := range msgs {
		m := &msgs[i]
		resp := c.admit(e, cl, frame, m, b, slot, up, &memo, now)
		answered := m.HasID() || m.Invalid != nil
		switch {
		case resp == nil:
		case b == nil:
			e.deliver(cl, Delivery{Msg: resp})
		default:
			answers = append(answers, slotAnswer{slot, resp})
		}
		if answered {
			expect = true
			slot++
		}
	}
	if up != nil && up.Len() > 0 && c.gen != 0 {
		// The forwarded elements go as one array (or several, past
		// UpstreamMaxBatch): the node runs them in order. Past the
		// bound on calls at the node they queue as one unit.
		c.sendOrQueueBatch(e, cl.id, up, now)
	}
	for _, a := range answers {
		if b.Add(a.slot, a.resp) {
			// Completed by muxd's own answers: the batch's
			// subscriptions start receiving pushes now.
			c.batchDone(e, cl, b)
		}
	}
	c.finish(e)
	return expect
}

// slotAnswer is muxd's own answer to the batch element of slot.
type slotAnswer struct {
	slot int
	resp []byte
}

// maxUpstreamIDLen is the longest id muxd writes upstream: a uint64 in
// decimal.
const maxUpstreamIDLen = 20

// ErrMessageTooLarge refuses a message too large to take: a client
// message past max_message_bytes (the shell's refusal), or a request whose
// upstream frame would pass Config.MaxUpstreamMessage.
var ErrMessageTooLarge = router.ErrorLimit.Because("message too large")

// methodMemo is the method of the last message of a frame that had one,
// and the deny policy's verdict on it: the elements of a batch mostly call
// the same method.
type methodMemo struct {
	raw    []byte // as it lies in the frame
	method string
	denied bool
}

// method returns m's method and whether the policy denies it.
func (c *Core) method(frame []byte, m *router.Message, memo *methodMemo) (string, bool) {
	raw := m.Method.In(frame)
	if len(raw) > 0 && bytes.Equal(raw, memo.raw) {
		return memo.method, memo.denied
	}
	method := methodName(frame, m)
	denied := c.policy.denied(method)
	*memo = methodMemo{raw, method, denied}
	return method, denied
}

// admit decides what happens to one message. It returns muxd's own answer
// when there is one now, or nil when the message went (or will go)
// upstream. up collects the forwarded elements of a client batch (nil for
// a single message); slot is m's place in b's answer array.
func (c *Core) admit(e *Effects, cl *client, frame []byte, m *router.Message, b *router.Batch, slot int, up *router.UpstreamBatch, memo *methodMemo, now time.Time) []byte {
	var id []byte
	if m.HasID() {
		id = m.ID.In(frame)
	}
	if m.Ignored {
		// A notification muxd neither answers nor forwards.
		c.obs.Dropped(DropIgnoredNotification)
		return nil
	}
	if m.Invalid != nil {
		reason := strings.TrimPrefix(m.Invalid.Error(), router.ErrInvalid.Error()+": ")
		return c.errorBytes("", id, router.ErrorInvalidRequest.Because(reason))
	}
	method, denied := c.method(frame, m, memo)
	if denied {
		if !m.HasID() {
			return nil
		}
		return c.errorBytes(method, id, router.MethodDenied(method))
	}
	if foreignSubscription(method) {
		if !m.HasID() {
			c.obs.Dropped(DropSubscribeNotification)
			return nil
		}
		return c.errorBytes(method, id, errForeignSubscription(method))
	}
	elem, idSpan := router.Element(frame, m)
	if !m.HasID() {
		c.notification(e, elem, method, up)
		return nil
	}
	c.obs.Request(method)
	if c.shut {
		return c.errorBytes(method, id, c.shutErr)
	}
	if cl.inflight >= c.cfg.MaxInFlight {
		c.obs.Limit("in_flight")
		return c.errorBytes(method, id, router.ErrorLimit.Because("too many requests in flight"))
	}
	if cl.named != nil {
		if limit := cl.named.admit(now); limit != "" {
			c.obs.Limit(limit)
			return c.errorBytes(method, id, namedRefusal[limit])
		}
	}
	// What a request costs to hold is its upstream frame (the element
	// with a longer id, and the client's id after it). A client holding
	// nothing may always send one request, whatever its size: the
	// message limit bounds that. An eth_unsubscribe always passes: it
	// gives back what a subscription holds.
	if method != methodUnsubscribe && c.overHeld(cl, len(elem)+len(id)+maxUpstreamIDLen) {
		return c.errorBytes(method, id, errHeldBytes)
	}
	// Its upstream frame: the element with the client's id rewritten (or,
	// for eth_subscribe, muxd's own frame with the same params, no
	// longer). One past the node's limit would make the node close the
	// shared connection, failing everyone's calls in flight.
	if lim := c.cfg.MaxUpstreamMessage; lim > 0 && len(elem)-idSpan.Len+maxUpstreamIDLen > lim {
		c.obs.Limit("message_size")
		return c.errorBytes(method, id, ErrMessageTooLarge)
	}
	p := router.Pending{
		Client:   cl.id,
		ID:       id,
		Method:   method,
		Sent:     now,
		Deadline: now.Add(c.cfg.RequestTimeout),
		Batch:    b,
		Slot:     slot,
	}
	// p outlives frame, whose buffer the reader reuses: it keeps a copy
	// of the client's id.
	switch method {
	case methodSubscribe:
		p.ID = bytes.Clone(id)
		return c.subscribe(e, cl, frame, m, p)
	case methodUnsubscribe:
		p.ID = bytes.Clone(id)
		return c.unsubscribe(e, cl, frame, m, p)
	}
	// A batch element never coalesces (its batch goes upstream as its
	// own array), so it is keyed only when it may be answered from the
	// cache.
	if p.Key = c.callKey(frame, m, method, up != nil); p.Key != "" {
		if x, ok := c.cachedAnswer(method, p.Key); ok {
			return c.fromCache(e, cl, method, x, id, b)
		}
	}
	uid := c.reqs.Next()
	var idBuf [20]byte
	if up != nil {
		// Laid out in the batch's array as it is built.
		buf := router.AppendSpliced(up.Room(), elem, idSpan, router.AppendUpstreamID(idBuf[:0], uid))
		p.Frame, p.ID, p.Up = buf[:len(buf):len(buf)], up.KeepID(id), up
	} else {
		// One allocation holds the upstream frame and, after it, the
		// copy of the client's id.
		buf := router.AppendSpliced(make([]byte, 0, len(elem)+20+len(id)), elem, idSpan, router.AppendUpstreamID(idBuf[:0], uid))
		n := len(buf)
		buf = append(buf, id...)
		p.Frame, p.ID = buf[:n:n], buf[n:]
	}
	if !c.enqueue(e, cl, uid, p, now) {
		c.obs.Limit("waiting")
		return c.errorBytes(method, id, router.ErrorUnavailable.Because("too many requests waiting for the upstream"))
	}
	return nil
}

// notification forwards a client notification: fire and forget, no pending
// entry, no answer. eth_subscribe and eth_unsubscribe are not forwarded as
// notifications: the first would leave an upstream subscription nobody
// holds, the second could cancel one that others share.
func (c *Core) notification(e *Effects, elem []byte, method string, up *router.UpstreamBatch) {
	switch {
	case method == methodSubscribe || method == methodUnsubscribe:
		c.obs.Dropped(DropSubscribeNotification)
	case c.gen == 0 || c.shut:
		c.obs.Dropped(DropNoUpstream)
	case up != nil:
		up.AddNotification(append(up.Room(), elem...))
	default:
		c.send(e, bytes.Clone(elem))
	}
}

// enqueue records p as in flight on the current connection, or holds it
// until an upstream is connected. It reports false when the waiting queue
// is full. A request of a client batch (p.Up set) joins its upstream array,
// which the caller sends once the whole batch is admitted.
func (c *Core) enqueue(e *Effects, cl *client, uid uint64, p router.Pending, now time.Time) bool {
	if c.gen == 0 && c.waiting.full(c.cfg.MaxWaiting) {
		return false
	}
	if p.Up != nil {
		// First, so that the pending table keeps the call with the
		// other calls of its array.
		p.Up.AddCall(uid, p.Frame)
	}
	switch {
	case c.gen == 0:
		c.waiting.add(waitingRequest{uid, p, now.Add(c.cfg.UpstreamWait)})
		if cl != nil {
			cl.waiting++
		}
	case p.Up == nil:
		c.forwardOrQueue(e, uid, p, now)
	default:
		c.reqs.Add(uid, p)
	}
	c.started(cl, len(p.Frame))
	return true
}

// fromCache answers a request with id from the cache: a single request
// gets the cached answer with its id for the shell to splice in (nil
// returned), an element of batch b the spliced bytes.
func (c *Core) fromCache(e *Effects, cl *client, method string, x *cached, id []byte, b *router.Batch) []byte {
	c.obs.Answered(method, 0, OutcomeCache, 0)
	if b != nil {
		return router.AppendSpliced(make([]byte, 0, len(x.msg)-x.at.Len+len(id)), x.msg, x.at, id)
	}
	e.deliver(cl, Delivery{Msg: x.msg, At: x.at, ID: bytes.Clone(id)})
	return nil
}

// errorBytes builds one of muxd's own error responses, to a request of
// method ("" when unknown) answered at its arrival, and counts it.
func (c *Core) errorBytes(method string, id []byte, err router.RPCError) []byte {
	c.obs.Answered(method, err.Code, ownOutcome(err), -1)
	return router.ErrorResponse(id, err)
}

// reply sends muxd's own error for a whole frame.
func (c *Core) reply(e *Effects, cl *client, id []byte, err router.RPCError) {
	e.deliver(cl, Delivery{Msg: c.errorBytes("", id, err)})
}

// answer hands the answer to a pending request to its client, through its
// batch when it belongs to one. code is the JSON-RPC error code of the
// answer, 0 for a result. d is the answer as a delivery; an answer that is
// part of a batch must be owned bytes (d.Msg, no splice). It counts a
// result or the node's error; muxd's own errors go through answerOwn.
func (c *Core) answer(e *Effects, cl *client, p *router.Pending, d Delivery, code int, now time.Time) {
	c.answerAs(e, cl, p, d, code, nodeOutcome(code), now)
}

// answerOwn answers a pending request with muxd's own error err (a
// timeout, the connection lost, shutdown…).
func (c *Core) answerOwn(e *Effects, cl *client, p *router.Pending, err router.RPCError, now time.Time) {
	c.answerAs(e, cl, p, Delivery{Msg: router.ErrorResponse(p.ID, err)}, err.Code, ownOutcome(err), now)
}

// answerAs is answer with the outcome to count.
func (c *Core) answerAs(e *Effects, cl *client, p *router.Pending, d Delivery, code int, o Outcome, now time.Time) {
	c.answered(p, code, o, now)
	if p.Batch != nil {
		if p.Batch.Add(p.Slot, d.Msg) {
			c.batchDone(e, cl, p.Batch)
		}
		return
	}
	e.deliver(cl, d)
}

// answered counts p's answer, with error code code and outcome o, and its
// latency.
func (c *Core) answered(p *router.Pending, code int, o Outcome, now time.Time) {
	lat := time.Duration(-1)
	if !p.Sent.IsZero() {
		lat = now.Sub(p.Sent)
	}
	c.obs.Answered(p.Method, code, o, lat)
	// A transaction's answer, or muxd's timeout or loss for it (it may
	// have run): what the client learns from it may be newer than any
	// read in flight. A node's refusal changed nothing.
	if (code == 0 || code == router.CodeUnavailable) && p.Client != router.Internal && changesState(p.Method) {
		c.coal.stateChanged()
	}
}

// batchDone sends a completed batch's array, and lets the subscriptions it
// created receive pushes from then on.
func (c *Core) batchDone(e *Effects, cl *client, b *router.Batch) {
	e.deliver(cl, Delivery{Msg: b.Encode()})
	for _, subID := range b.Subs {
		if m := cl.subs[subID]; m != nil {
			c.activate(e, m)
		}
	}
}

// errHeldBytes refuses what would take a client past max_held_bytes, or
// all clients past max_held_bytes_total.
var errHeldBytes = router.ErrorLimit.Because("too many request bytes in flight")

// overHeld reports, counting the refusal, whether cl holding size more
// bytes would pass max_held_bytes (a client holding nothing may always
// send one), or all clients together max_held_bytes_total (so that many
// clients cannot make muxd hold what one may not).
func (c *Core) overHeld(cl *client, size int) bool {
	if cl.held > 0 && cl.held+size > c.cfg.MaxHeldBytes {
		c.obs.Limit("held_bytes")
		return true
	}
	if c.cfg.MaxHeldBytesTotal > 0 && c.held+size > c.cfg.MaxHeldBytesTotal {
		c.obs.Limit("held_bytes_total")
		return true
	}
	return false
}

// Refuse is the event of a frame the shell refused before scanning it (one
// over the message size limit): the client gets err, with a null id.
func (c *Core) Refuse(e *Effects, id router.ClientID, reqID []byte, err router.RPCError) {
	e.Reset()
	if cl := c.clients[id]; cl != nil {
		c.reply(e, cl, reqID, err)
	}
}
