package mux

import (
	"bytes"
	"errors"
	"strings"
	"time"

	"github.com/muxd/muxd/router"
)

// Well-known method names that muxd treats specially.
const (
	methodSubscribe    = "eth_subscribe"
	methodUnsubscribe  = "eth_unsubscribe"
	methodSubscription = "eth_subscription"
)

// dispatch handles one frame from client c: it answers what muxd answers
// itself, sends every well-formed request upstream under a fresh id (or
// holds it until an upstream is up), and arranges for batch answers to be
// re-assembled. It never blocks on the upstream or on another client. It
// reports whether an answer will be sent (false for notifications only),
// for HTTP, which must answer an empty 200 then. dispatch keeps no reference
// to frame once it returns: the readers reuse its buffer.
func (s *Server) dispatch(c *Client, frame []byte) bool {
	f, err := router.ScanClient(frame, c.scan)
	c.scan = reuse(f.Messages, maxKeptScan) // a big batch's is let go
	switch {
	case errors.Is(err, router.ErrParse):
		s.reply(c, nil, router.ErrorParse)
		return true
	case errors.Is(err, router.ErrEmptyBatch):
		s.reply(c, nil, router.ErrorEmptyBatch)
		return true
	case err != nil:
		s.reply(c, nil, router.ErrorInvalidRequest)
		return true
	}
	if f.Batch && len(f.Messages) > s.cfg.MaxBatch {
		s.metrics.limit("batch_size")
		s.reply(c, nil, router.ErrorLimit.Because("batch too large"))
		return true
	}

	now := time.Now()
	var b *router.Batch
	if f.Batch {
		want := 0
		for i := range f.Messages {
			if m := &f.Messages[i]; m.HasID() || m.Invalid != nil {
				want++
			}
		}
		if want == 0 {
			// Notifications only: forwarded, and nothing comes back.
			s.forwardAll(c, frame, f.Messages, nil, true, now)
			return false
		}
		b = router.NewBatch(c.id, want)
	}
	if s.forwardAll(c, frame, f.Messages, b, f.Batch, now) {
		return true
	}
	return false
}

// forwardAll handles the messages of one frame under one hold of s.mu and
// then writes what must go upstream. b re-assembles the answers of a batch
// (nil for a single message and for a batch of notifications only); batch
// says the frame is a batch, whose forwarded elements go upstream as one
// array. It reports whether an answer will come.
func (s *Server) forwardAll(c *Client, frame []byte, msgs []router.Message, b *router.Batch, batch bool, now time.Time) bool {
	var (
		out       outgoing
		immediate []byte // answer to a single message, known now
		expect    bool
		answers   [][]byte // muxd's own answers to batch elements
	)
	if batch {
		out.batch = router.NewUpstreamBatch(len(frame), len(msgs))
	}
	s.mu.Lock()
	up := s.up
	for i := range msgs {
		m := &msgs[i]
		resp := s.admitLocked(c, frame, m, b, now, up, &out)
		if m.HasID() || m.Invalid != nil {
			expect = true
		}
		if resp == nil {
			continue
		}
		if b == nil {
			immediate = resp
		} else {
			answers = append(answers, resp)
		}
	}
	if out.batch != nil && out.batch.Len() > 0 && up != nil {
		// The forwarded elements go as one array (or several, past
		// UpstreamMaxBatch): the node runs them in order.
		out.frames = out.batch.NextArrays(out.frames, s.cfg.UpstreamMaxBatch)
	}
	for _, a := range answers {
		if b.Add(a) {
			// Completed by muxd's own answers: as in deliverLocked, the
			// batch's subscriptions start receiving pushes now, and the
			// array is queued before s.mu is released so that no push
			// can overtake it.
			c.send(b.Encode())
			s.activateLocked(c, b.Subs...)
		}
	}
	s.mu.Unlock()

	up.send(out.frames...)
	if immediate != nil {
		c.send(immediate)
	}
	return expect
}

// maxKeptScan is the largest scan buffer a session keeps between frames.
// (Message is 144 bytes; append rounds a growing slice up to its size
// class, so 10 messages already take a capacity of 18: a bound of 16 let a
// batch of 10 regrow its buffer every time.)
const maxKeptScan = 64

// methodName returns m's method, without allocating for the methods muxd
// knows (the common case on the hot path).
func methodName(frame []byte, m *router.Message) string {
	if raw := m.Method.In(frame); len(raw) >= 2 {
		if name, ok := knownMethods[string(raw[1:len(raw)-1])]; ok {
			return name
		}
	}
	return m.MethodName(frame)
}

// outgoing collects, while s.mu is held, what is to be done after it is
// released.
type outgoing struct {
	frames [][]byte // to write upstream
	// batch collects the forwarded elements of the client batch being
	// admitted, to go upstream as arrays; nil for a single message.
	batch *router.UpstreamBatch
}

// admitLocked decides what happens to one message. It returns muxd's own
// answer when there is one now, or nil when the message went (or will go)
// upstream. Caller holds s.mu.
func (s *Server) admitLocked(c *Client, frame []byte, m *router.Message, b *router.Batch, now time.Time, up *upstreamConn, out *outgoing) []byte {
	var id []byte
	if m.HasID() {
		id = m.ID.In(frame)
	}
	if m.Invalid != nil {
		e := router.ErrorInvalidRequest.Because(strings.TrimPrefix(m.Invalid.Error(), router.ErrInvalid.Error()+": "))
		return s.errorBytes(id, e)
	}
	method := methodName(frame, m)
	if s.policy.denied(method) {
		if !m.HasID() {
			return nil
		}
		return s.errorBytes(id, router.ErrorMethodDenied)
	}
	elem, idSpan := router.Element(frame, m)
	if !m.HasID() {
		// A notification: fire and forget. No pending entry, no answer.
		// eth_subscribe and eth_unsubscribe are not forwarded as
		// notifications: the first would leave an upstream subscription
		// nobody holds, the second could cancel one that others share.
		if method == methodSubscribe || method == methodUnsubscribe {
			s.metrics.drop(DropSubscribeNotification)
			return nil
		}
		if up == nil {
			s.metrics.drop(DropNoUpstream)
			return nil
		}
		if out.batch != nil {
			out.batch.AddNotification(append(out.batch.Room(), elem...))
			return nil
		}
		out.frames = append(out.frames, append([]byte(nil), elem...))
		return nil
	}
	s.metrics.request(method)
	if c.inflight >= s.cfg.MaxInFlight {
		s.metrics.limit("in_flight")
		return s.errorBytes(id, router.ErrorLimit.Because("too many requests in flight"))
	}
	// What a request costs to hold is its upstream frame (the element
	// with a longer id, and the client's id after it). A client holding
	// nothing may always send one request, whatever its size: the
	// message limit bounds that.
	if size := len(elem) + len(id) + 20; c.held > 0 && c.held+size > s.cfg.MaxHeldBytes {
		s.metrics.limit("held_bytes")
		return s.errorBytes(id, router.ErrorLimit.Because("too many request bytes in flight"))
	}
	p := router.Pending{
		Client:   c.id,
		ID:       id,
		Method:   method,
		Sent:     now,
		Deadline: now.Add(s.cfg.RequestTimeout),
		Batch:    b,
	}
	// p outlives frame, whose buffer the reader reuses: it keeps a copy
	// of the client's id.
	switch method {
	case methodSubscribe:
		p.ID = bytes.Clone(id)
		return s.subscribeLocked(c, frame, m, p, up, out)
	case methodUnsubscribe:
		p.ID = bytes.Clone(id)
		return s.unsubscribeLocked(c, frame, m, p, up, out)
	}
	uid := s.reqs.Next()
	var idBuf [20]byte
	if out.batch != nil {
		// Laid out in the batch's array as it is built.
		buf := router.AppendSpliced(out.batch.Room(), elem, idSpan, router.AppendUpstreamID(idBuf[:0], uid))
		p.Frame, p.ID, p.Up = buf[:len(buf):len(buf)], out.batch.KeepID(id), out.batch
	} else {
		// One allocation holds the upstream frame and, after it, the
		// copy of the client's id.
		buf := router.AppendSpliced(make([]byte, 0, len(elem)+20+len(id)), elem, idSpan, router.AppendUpstreamID(idBuf[:0], uid))
		n := len(buf)
		buf = append(buf, id...)
		p.Frame, p.ID = buf[:n:n], buf[n:]
	}
	if !s.enqueueLocked(c, uid, p, up, out) {
		s.metrics.limit("waiting")
		return s.errorBytes(id, router.ErrorUnavailable.Because("too many requests waiting for the upstream"))
	}
	return nil
}

// enqueueLocked records p as in flight on up, or holds it until an upstream
// is connected. It reports false when the waiting queue is full. A request
// of a client batch (p.Up set) joins its upstream array, which the caller
// sends once the whole batch is admitted. Caller holds s.mu.
func (s *Server) enqueueLocked(c *Client, uid uint64, p router.Pending, up *upstreamConn, out *outgoing) bool {
	if up == nil {
		if len(s.waiting) >= s.cfg.MaxWaiting {
			return false
		}
		s.waiting = append(s.waiting, waitingRequest{uid, p, p.Sent.Add(s.cfg.UpstreamWait)})
	} else {
		s.reqs.Add(uid, p)
		if p.Up == nil {
			out.frames = append(out.frames, p.Frame)
		}
	}
	if p.Up != nil {
		p.Up.AddCall(uid, p.Frame)
	}
	s.startedLocked(c, len(p.Frame))
	return true
}

// startedLocked counts one more request in flight, for client c (nil for
// muxd's own), holding held bytes of it. Its end is counted by endedLocked
// with the same held. Caller holds s.mu.
func (s *Server) startedLocked(c *Client, held int) {
	if c != nil {
		c.inflight++
		c.held += held
	}
	s.metrics.InFlight.Inc()
}

// endedLocked counts one request of c (nil for muxd's own), which held held
// bytes, as no longer in flight, and tells a waiting Shutdown when that was
// the last. Caller holds s.mu.
func (s *Server) endedLocked(c *Client, held int) {
	if c != nil {
		c.inflight--
		c.held -= held
	}
	s.metrics.InFlight.Dec()
	s.checkIdleLocked()
}

// errorBytes builds one of muxd's own error responses and counts it.
func (s *Server) errorBytes(id []byte, e router.RPCError) []byte {
	s.metrics.response(e.Code)
	return router.ErrorResponse(id, e)
}

// reply sends muxd's own error for a whole frame.
func (s *Server) reply(c *Client, id []byte, e router.RPCError) {
	c.send(s.errorBytes(id, e))
}

// deliverLocked hands the answer to a pending request to its client, through its
// batch when it belongs to one. code is the JSON-RPC error code of the
// answer, 0 for a result. Caller holds s.mu: queueing for a client never
// blocks, so holding the lock here costs only the copy into the batch.
func (s *Server) deliverLocked(c *Client, p router.Pending, resp []byte, code int) {
	s.answeredLocked(p, code)
	if p.Batch != nil {
		if !p.Batch.Add(resp) {
			return
		}
		c.send(p.Batch.Encode())
		s.activateLocked(c, p.Batch.Subs...)
		return
	}
	c.send(resp)
}

// answeredLocked counts p's answer, with error code code (0 for a
// result), and its latency. Caller holds s.mu.
func (s *Server) answeredLocked(p router.Pending, code int) {
	s.metrics.response(code)
	if !p.Sent.IsZero() {
		s.metrics.Latency.Observe(time.Since(p.Sent).Seconds())
	}
}
