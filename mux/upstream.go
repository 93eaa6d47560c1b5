package mux

import (
	"context"
	"fmt"
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
		out.frames = append(out.frames, w.p.Frame)
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
	// One buffer for every frame: route copies what it keeps. The size
	// limit is the connection's read limit (reconnect.WebSocketDialer).
	var frame []byte
	for {
		_, r, err := u.Reader(context.Background())
		if err == nil {
			frame, err = readMessage(frame, r, -1)
		}
		if err != nil {
			return fmt.Errorf("read upstream: %w", err)
		}
		s.metrics.UpstreamFramesIn.Inc()
		s.route(u, frame)
		frame = reuse(frame, maxKeptUpstreamBuf)
	}
}

// route delivers one upstream frame: responses by id (layer 1), pushes by
// subscription id (layer 2). Anything else is counted and dropped.
func (s *Server) route(u *upstreamConn, frame []byte) {
	f, err := router.ScanUpstream(frame, u.msgs)
	if err != nil {
		s.dropped(DropMalformed, "upstream sent a frame that is not valid JSON", "gen", u.Gen, "bytes", len(frame))
		return
	}
	u.msgs = f.Messages
	for i := range f.Messages {
		m := &f.Messages[i]
		switch {
		case m.HasID():
			s.routeResponse(u, frame, m)
		case m.MethodIs(frame, methodSubscription):
			s.routePush(u, frame, m)
		default:
			s.dropped(DropUnexpected, "upstream sent a message that is neither a response nor a subscription push", "gen", u.Gen)
		}
	}
	clear(u.msgs)
}

// routeResponse is layer 1: the upstream id names the pending request; the
// client's own id bytes are spliced back in.
func (s *Server) routeResponse(u *upstreamConn, frame []byte, m *router.Message) {
	elem, idSpan := router.Element(frame, m)
	raw := idSpan.In(elem)
	if router.IsNull(raw) {
		s.dropped(DropNullID, "upstream answered with id null (a protocol error on its side)", "gen", u.Gen)
		return
	}
	uid, ok := router.ParseUpstreamID(raw)
	if !ok {
		s.dropped(DropUnknownID, "upstream response with an id muxd never sent", "gen", u.Gen)
		return
	}
	s.mu.Lock()
	if s.up != u {
		s.mu.Unlock()
		s.dropped(DropUnknownID, "upstream response on a connection that is no longer current", "gen", u.Gen)
		return
	}
	p, ok := s.reqs.Take(uid)
	if !ok {
		s.mu.Unlock()
		s.dropped(DropUnknownID, "upstream response matches no pending request", "gen", u.Gen, "id", uid)
		return
	}
	if p.Kind != router.KindCall {
		s.settledLocked(p)
		var out outgoing
		if p.Kind == router.KindSubscribe {
			s.subscribedLocked(frame, m, uid, p, &out)
		}
		up := s.up
		s.mu.Unlock()
		up.send(out.frames...)
		return
	}
	c := s.clients[p.Client]
	// The request is settled and its answer queued in one hold of the
	// lock, so that nothing (Shutdown, an IPC close after a parse error)
	// sees the client idle before the answer is queued. A small answer is
	// copied under that same hold; a large one (blocks, traces) is copied
	// without the lock, which is then taken again.
	if len(elem) <= inlineSpliceMax {
		s.settledLocked(p)
		if c != nil {
			resp := router.AppendSpliced(make([]byte, 0, len(elem)-len(raw)+len(p.ID)), elem, idSpan, p.ID)
			s.deliverLocked(c, p, resp, responseCode(frame, m))
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	resp := router.AppendSpliced(make([]byte, 0, len(elem)-len(raw)+len(p.ID)), elem, idSpan, p.ID)
	s.mu.Lock()
	if c != nil && s.clients[p.Client] != c {
		// The client left meanwhile; removeClient accounted for this
		// request with the rest of its in-flight ones.
		s.mu.Unlock()
		return
	}
	s.settledLocked(p)
	if c != nil {
		s.deliverLocked(c, p, resp, responseCode(frame, m))
	}
	s.mu.Unlock()
}

// inlineSpliceMax is the largest answer whose id is spliced with s.mu held.
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
	s.reqs.Discard(func(id uint64, p router.Pending) {
		if p.Kind != router.KindCall {
			s.settledLocked(p)
			return // subscriptions are redone on the next connection
		}
		if s.policy.retryable(p.Method) && now.Before(p.Deadline) && len(s.waiting) < s.cfg.MaxWaiting {
			s.waiting = append(s.waiting, waitingRequest{id, p})
			retried++
			return
		}
		s.settledLocked(p)
		failed = append(failed, p)
	})
	s.subscriptionsLostLocked()
	s.mu.Unlock()
	s.metrics.Retried.Add(float64(retried))
	s.log.Warn("upstream lost", "gen", u.Gen, "retrying", retried, "failed", len(failed))
	for _, p := range failed {
		s.answerError(p, router.ErrorUnavailable.Because("connection lost"))
	}
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
