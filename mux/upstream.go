package mux

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/reconnect"
	"github.com/muxd/muxd/router"
)

// upstreamConn is the shared connection to the node. Writes may come from
// any goroutine (coder/websocket serializes them); exactly one goroutine,
// serveUpstream, reads it.
type upstreamConn struct {
	*reconnect.Conn
	ctx    context.Context
	srv    *Server
	msgs   []router.Message // scan buffer, owned by the reader
	uids   []uint64         // routeWholeBatch's buffer, owned by the reader
	failed sync.Once
}

// send writes frames upstream, in order. A write error means the connection
// is broken: it is closed, so that the reader fails and the connection is
// replaced. The requests written are then dealt with by the loss handling,
// like every other request in flight on it. send on a nil connection does
// nothing (the requests were queued to wait instead).
func (u *upstreamConn) send(frames ...[]byte) {
	if u == nil {
		return
	}
	for _, f := range frames {
		// Not u.ctx: coder/websocket watches a cancellable context with
		// an AfterFunc on every call, a real cost per frame; the
		// connection is closed to stop a write instead (readUpstream).
		if err := u.Write(context.Background(), websocket.MessageText, f); err != nil {
			u.failed.Do(func() {
				u.srv.log.Warn("upstream write failed", "gen", u.Gen, "err", err)
				u.CloseNow()
			})
			return
		}
		u.srv.metrics.UpstreamFramesOut.Inc()
	}
}

// serveUpstream runs for the life of one upstream connection: it makes the
// connection current, sends what was waiting for it, resubscribes, and then
// reads and routes every message in arrival order until the connection
// fails.
func (s *Server) serveUpstream(ctx context.Context, rc *reconnect.Conn) error {
	u := &upstreamConn{Conn: rc, ctx: ctx, srv: s}
	var out outgoing
	s.mu.Lock()
	s.gens++
	if s.gens > 1 {
		s.metrics.UpstreamReconnects.Inc()
	}
	s.setUp(u)
	// Subscriptions first: a burst of waiting requests must not keep the
	// node from hearing the resubscribes before the next drop.
	s.resubscribeLocked(&out)
	waiting := s.waiting
	s.waiting = nil
	for _, w := range waiting {
		s.reqs.Add(w.id, w.p)
		switch {
		case w.p.Up == nil:
			out.frames = append(out.frames, w.p.Frame)
		case !w.p.Up.Started():
			// A batch's requests wait together, in order: its array
			// goes where its first request stood.
			out.frames = w.p.Up.NextArrays(out.frames, s.cfg.UpstreamMaxBatch)
		}
	}
	s.mu.Unlock()
	s.log.Info("upstream session started", "gen", rc.Gen, "sent_waiting", len(waiting), "resubscribed", len(out.frames)-len(waiting))
	u.send(out.frames...)

	err := s.readUpstream(ctx, u)
	s.upstreamLost(u)
	return err
}

// readUpstream is the one reader of the shared connection.
func (s *Server) readUpstream(ctx context.Context, u *upstreamConn) error {
	// Reads and writes use a context that never ends (see send); when ctx
	// ends the connection is closed, which ends them.
	stop := context.AfterFunc(ctx, func() { u.CloseNow() })
	defer stop()
	// Each frame is read into buf after frameHeadroom bytes (see
	// framePool). route copies what it keeps, except a large answer that
	// it lends to its client whole: buf is then the client's, and the
	// next frame takes another from the pool. The size limit is the
	// connection's read limit (reconnect.WebSocketDialer).
	var buf []byte
	for {
		_, r, err := u.Reader(context.Background())
		if err == nil {
			buf, err = s.frames.readFrame(buf, r)
		}
		if err != nil {
			return fmt.Errorf("read upstream: %w", err)
		}
		s.metrics.UpstreamFramesIn.Inc()
		switch {
		case s.route(u, buf):
			buf = nil
		case cap(buf) > maxKeptUpstreamBuf:
			s.frames.put(buf)
			buf = nil
		}
	}
}

// route delivers one upstream frame, buf[frameHeadroom:]: responses by id
// (layer 1), pushes by subscription id (layer 2). Anything else is counted
// and dropped. It reports whether buf was lent to a client (see
// routeResponse); otherwise nothing keeps a reference to it.
func (s *Server) route(u *upstreamConn, buf []byte) (lent bool) {
	frame := buf[frameHeadroom:]
	if len(frame) > inlineSpliceMax {
		// A large answer is routed by its head: its result is
		// forwarded unscanned (router.ScanResponseHead).
		if m, ok := router.ScanResponseHead(frame); ok {
			return s.routeResponse(u, buf, &m, true, false)
		}
	}
	f, err := router.ScanUpstream(frame, u.msgs)
	if err != nil {
		s.dropped(DropMalformed, "upstream sent a frame that is not valid JSON", "gen", u.Gen, "bytes", len(frame))
		return false
	}
	u.msgs = f.Messages
	if f.Batch && len(f.Messages) > 1 && s.routeWholeBatch(u, frame, f.Messages) {
		clear(u.msgs)
		return false
	}
	// Only the one answer of a frame may take the buffer with it.
	lendable := !f.Batch && len(f.Messages) == 1
	for i := range f.Messages {
		m := &f.Messages[i]
		switch {
		case m.HasID():
			if s.routeResponse(u, buf, m, lendable, f.Batch && len(f.Messages) == 1) {
				lent = true
			}
		case m.MethodIs(frame, methodSubscription):
			s.routePush(u, frame, m)
		default:
			s.dropped(DropUnexpected, "upstream sent a message that is neither a response nor a subscription push", "gen", u.Gen)
		}
	}
	clear(u.msgs)
	return lent
}

// wholeBatchMax is the largest array answer that routeWholeBatch splices
// with s.mu held; larger ones go element by element, which copies large
// answers without the lock.
const wholeBatchMax = 64 << 10

// routeWholeBatch is the fast path for the common case of a client batch:
// the node's array answer holds exactly the answers to one client batch,
// nothing of which has been answered otherwise. The ids are spliced in one
// pass into the client's array, with no per-element copies and no
// re-assembly. It reports false, having changed nothing, when the case does
// not apply.
func (s *Server) routeWholeBatch(u *upstreamConn, frame []byte, msgs []router.Message) bool {
	if len(frame) > wholeBatchMax {
		return false
	}
	// The ids, sorted, must all differ: a node that repeats an id gets
	// the element-by-element path, which drops the repeat.
	uids := u.uids[:0]
	for i := range msgs {
		m := &msgs[i]
		if !m.HasID() {
			return false
		}
		uid, ok := router.ParseUpstreamID(m.ID.In(frame))
		if !ok {
			return false
		}
		uids = append(uids, uid)
	}
	u.uids = uids
	slices.Sort(uids)
	for i := 1; i < len(uids); i++ {
		if uids[i] == uids[i-1] {
			return false
		}
	}
	s.mu.Lock()
	if !s.wholeBatchLocked(u, uids, len(msgs)) {
		s.mu.Unlock()
		return false
	}
	var (
		b    *router.Batch
		next [][]byte
		out  []byte
	)
	for i := range msgs {
		m := &msgs[i]
		elem, idSpan := router.Element(frame, m)
		uid, _ := router.ParseUpstreamID(idSpan.In(elem))
		p, _ := s.reqs.Take(uid)
		if b == nil {
			b = p.Batch
			out = make([]byte, 1, len(frame)+b.Want()*(len(p.ID)+1)+2)
			out[0] = '['
		} else {
			out = append(out, ',')
		}
		if p.Up.Settle(uid) {
			next = p.Up.NextArrays(next, s.cfg.UpstreamMaxBatch)
		}
		s.settledLocked(p)
		s.answeredLocked(p, responseCode(frame, m))
		out = router.AppendSpliced(out, elem, idSpan, p.ID)
	}
	b.Close()
	if c := s.clients[b.Client]; c != nil {
		c.send(append(out, ']'))
	}
	s.mu.Unlock()
	u.send(next...) // nothing in practice: the whole client batch is answered
	return true
}

// wholeBatchLocked reports whether uids, all different, are the pending
// calls of one client batch that expects exactly n answers and has none
// yet. Caller holds s.mu.
func (s *Server) wholeBatchLocked(u *upstreamConn, uids []uint64, n int) bool {
	if s.up != u {
		return false
	}
	var b *router.Batch
	for _, uid := range uids {
		p, ok := s.reqs.Peek(uid)
		if !ok || p.Kind != router.KindCall || p.Batch == nil || p.Up == nil {
			return false
		}
		if b == nil {
			b = p.Batch
			if b.Want() != n || !b.Untouched() || len(b.Subs) > 0 {
				return false
			}
		} else if p.Batch != b {
			return false
		}
	}
	return b != nil
}

// routeResponse is layer 1: the upstream id names the pending request; the
// client's own id bytes are spliced back in. buf holds frameHeadroom bytes
// and the frame m was scanned from. A large answer (blocks, traces) to a
// single request is not copied when lendable (it is the frame's only
// message): its id is spliced in place and the client is handed buf itself,
// which routeResponse then reports (true); the frame must not be read
// afterwards. arrayOfOne says m came alone in an array, which is how a node
// refuses a whole batch.
func (s *Server) routeResponse(u *upstreamConn, buf []byte, m *router.Message, lendable, arrayOfOne bool) bool {
	frame := buf[frameHeadroom:]
	elem, idSpan := router.Element(frame, m)
	raw := idSpan.In(elem)
	if router.IsNull(raw) {
		s.dropped(DropNullID, "upstream answered with id null (a protocol error on its side)", "gen", u.Gen)
		return false
	}
	uid, ok := router.ParseUpstreamID(raw)
	if !ok {
		s.dropped(DropUnknownID, "upstream response with an id muxd never sent", "gen", u.Gen)
		return false
	}
	s.mu.Lock()
	if s.up != u {
		s.mu.Unlock()
		s.dropped(DropUnknownID, "upstream response on a connection that is no longer current", "gen", u.Gen)
		return false
	}
	p, ok := s.reqs.Take(uid)
	if !ok {
		s.mu.Unlock()
		s.dropped(DropUnknownID, "upstream response matches no pending request", "gen", u.Gen, "id", uid)
		return false
	}
	var next [][]byte // the batch's next array, when this answer completes one
	if p.Up != nil {
		next = s.arrayAnsweredLocked(uid, p, frame, m, arrayOfOne)
		defer u.send(next...) // after s.mu is released, on every path below
	}
	if p.Kind != router.KindCall {
		s.settledLocked(p)
		var out outgoing
		switch p.Kind {
		case router.KindSubscribe:
			s.subscribedLocked(frame, m, uid, p, &out)
		case router.KindBackfill:
			s.backfillAnsweredLocked(frame, m, uid, &out)
		}
		up := s.up
		s.mu.Unlock()
		up.send(out.frames...)
		return false
	}
	c := s.clients[p.Client]
	code := responseCode(frame, m)
	// The request is settled and its answer queued in one hold of the
	// lock, so that nothing (Shutdown, an IPC close after a parse error)
	// sees the client idle before the answer is queued.
	if c != nil && lendable && p.Batch == nil && len(elem) > inlineSpliceMax {
		// The splice moves the few bytes before the id, not the answer.
		if resp, ok := spliceInPlace(buf, frameHeadroom+m.Start, len(elem), idSpan, p.ID); ok {
			s.settledLocked(p)
			s.deliverLentLocked(c, p, resp, buf, code)
			s.mu.Unlock()
			return true
		}
	}
	if c == nil || len(elem) <= inlineSpliceMax {
		s.settledLocked(p)
		if c != nil {
			resp := router.AppendSpliced(make([]byte, 0, len(elem)-len(raw)+len(p.ID)), elem, idSpan, p.ID)
			s.deliverLocked(c, p, resp, code)
		}
		s.mu.Unlock()
		return false
	}
	// A large answer that cannot be lent (an element of a batch, or an
	// id too long for the headroom) is copied without the lock, which is
	// then taken again.
	s.mu.Unlock()
	resp := router.AppendSpliced(make([]byte, 0, len(elem)-len(raw)+len(p.ID)), elem, idSpan, p.ID)
	s.mu.Lock()
	if s.clients[p.Client] != c {
		// The client left meanwhile; removeClient accounted for this
		// request with the rest of its in-flight ones.
		s.mu.Unlock()
		return false
	}
	s.settledLocked(p)
	s.deliverLocked(c, p, resp, code)
	s.mu.Unlock()
	return false
}

// arrayAnsweredLocked settles call uid of an upstream array, whose answer m
// has come, and returns the array to send next when this completes the one
// in flight. When the node refused the whole array (geth's "batch too
// large": one error, alone in an array, under the id of the array's first
// call), every other call of the array gets that same error, as the node
// wrote it, under its own id. Caller holds s.mu.
func (s *Server) arrayAnsweredLocked(uid uint64, p router.Pending, frame []byte, m *router.Message, arrayOfOne bool) [][]byte {
	var next [][]byte
	// Only -32600 (invalid request) counts as refusing the array: a node
	// that answers each call in an array of its own is within JSON-RPC, and
	// the first call's ordinary error (a revert) must stay its own.
	if first, calls := p.Up.FirstInFlight(); arrayOfOne && first == uid && calls > 1 && responseCode(frame, m) == router.CodeInvalidRequest {
		elem, idSpan := router.Element(frame, m)
		code := responseCode(frame, m)
		for _, id := range p.Up.InFlight(nil) {
			if id == uid {
				continue
			}
			q, ok := s.reqs.Take(id)
			if !ok {
				continue
			}
			if p.Up.Settle(id) {
				next = p.Up.NextArrays(next, s.cfg.UpstreamMaxBatch)
			}
			if c := s.settledLocked(q); c != nil {
				s.deliverLocked(c, q, router.AppendSpliced(nil, elem, idSpan, q.ID), code)
			}
		}
	}
	if p.Up.Settle(uid) {
		next = p.Up.NextArrays(next, s.cfg.UpstreamMaxBatch)
	}
	return next
}

// deliverLentLocked is deliverLocked for an answer that lies in a frame
// buffer lent to the client (not in a batch): the client's writer gives buf
// back to the pool once resp is written. Caller holds s.mu.
func (s *Server) deliverLentLocked(c *Client, p router.Pending, resp, buf []byte, code int) {
	s.answeredLocked(p, code)
	c.sendLent(resp, buf)
}

// spliceInPlace rewrites the message at buf[start:start+n], whose id sits at
// id (an offset into the message), to carry newID instead, without moving
// what follows the id: newID is written to end where the old id ended, and
// the bytes before the id move to just before it, into the headroom when
// newID is the longer. It returns the spliced message, a subslice of buf,
// or false when the headroom is too small.
func spliceInPlace(buf []byte, start, n int, id router.Span, newID []byte) ([]byte, bool) {
	idEnd := start + id.Off + id.Len
	newStart := idEnd - len(newID) - id.Off
	if newStart < 0 {
		return nil, false
	}
	copy(buf[newStart:], buf[start:start+id.Off]) // memmove: they may overlap
	copy(buf[idEnd-len(newID):], newID)
	return buf[newStart : start+n : start+n], true
}

// inlineSpliceMax is the largest answer that is copied for its client (its
// id spliced into the copy with s.mu held); a larger one is lent where it
// can be (routeResponse).
const inlineSpliceMax = 16 << 10

// responseCode reads error.code from a response for the metrics; 0 for a
// result. msg is the whole frame m was scanned from: m's spans are offsets
// into it, not into the element.
func responseCode(msg []byte, m *router.Message) int {
	if !m.Error.Present() {
		return 0
	}
	code, ok := router.ErrorCode(m.Error.In(msg))
	if !ok {
		return -1
	}
	return code
}

// settledLocked accounts for p leaving the pending table or the waiting
// queue for good, and returns its client (nil if gone or muxd's own).
// Caller holds s.mu.
func (s *Server) settledLocked(p router.Pending) *Client {
	c := s.clients[p.Client]
	s.endedLocked(c, len(p.Frame))
	return c
}

// upstreamLost discards the pending table of a connection that has failed.
// Nothing that was in flight on it can be delivered afterwards: its reader
// has stopped and the table is gone. Requests on the retry list go back to
// the waiting queue under their upstream id, while their deadline allows;
// every other request fails at once, because it may or may not have been
// executed.
func (s *Server) upstreamLost(u *upstreamConn) {
	now := time.Now()
	var failed []router.Pending
	retried := 0
	s.mu.Lock()
	if s.up == u {
		s.setUp(nil)
	}
	// A batch's retried requests go again as one array, in order, under
	// their upstream ids; Discard hands them over in id order.
	regrouped := map[*router.UpstreamBatch]*router.UpstreamBatch{}
	s.reqs.Discard(func(id uint64, p router.Pending) {
		if p.Kind != router.KindCall {
			s.settledLocked(p)
			return // subscriptions are redone on the next connection
		}
		// A request of a batch's later array was never sent: the node
		// cannot have run it, so it is sent again whatever its method.
		unsent := p.Up != nil && !p.Up.Sent(id)
		if (unsent || s.policy.retryable(p.Method)) && now.Before(p.Deadline) && len(s.waiting) < s.cfg.MaxWaiting {
			if p.Up != nil {
				ng := regrouped[p.Up]
				if ng == nil {
					ng = new(router.UpstreamBatch)
					regrouped[p.Up] = ng
				}
				ng.AddCall(id, p.Frame)
				p.Up = ng
			}
			s.waiting = append(s.waiting, waitingRequest{id, p, now.Add(s.cfg.UpstreamWait)})
			retried++
			return
		}
		s.settledLocked(p)
		failed = append(failed, p)
	})
	// Answered in the same hold that settled them: nothing (Shutdown, an
	// IPC session after a half-close) may see a client idle with its
	// answer not yet queued.
	lost := router.ErrorUnavailable.Because("connection lost")
	for _, p := range failed {
		if c := s.clients[p.Client]; c != nil && p.Client != router.Internal {
			s.deliverLocked(c, p, router.ErrorResponse(p.ID, lost), lost.Code)
		}
	}
	s.subscriptionsLostLocked()
	s.gap.Disconnected()
	clear(s.gapReqs)
	s.mu.Unlock()
	s.metrics.Retried.Add(float64(retried))
	s.log.Warn("upstream lost", "gen", u.Gen, "retrying", retried, "failed", len(failed))
}

// dropped counts a dropped upstream message and logs it, at most once a
// second per reason so that a misbehaving node cannot flood the log.
func (s *Server) dropped(r DropReason, msg string, args ...any) {
	s.metrics.drop(r)
	if s.dropLog.allow(r, time.Now()) {
		s.log.Warn(msg, append(args, "reason", r.String())...)
	}
}

// dropLimiter allows one log line per reason per second.
type dropLimiter struct {
	mu   sync.Mutex
	last [numDropReasons]time.Time
}

func (l *dropLimiter) allow(r DropReason, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.last[r]) < time.Second {
		return false
	}
	l.last[r] = now
	return true
}
