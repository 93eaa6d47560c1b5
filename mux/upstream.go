package mux

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/core"
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
	gen    uint64           // the core's number for this connection
	msgs   []router.Message // scan buffer, owned by the reader
	eff    *core.Effects    // the reader's core effects, owned by the reader
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
// connection current (the core resubscribes and sends what was waiting for
// it), and then reads and routes every message in arrival order until the
// connection fails.
func (s *Server) serveUpstream(ctx context.Context, rc *reconnect.Conn) error {
	u := &upstreamConn{Conn: rc, ctx: ctx, srv: s, eff: new(core.Effects)}
	s.mu.Lock()
	s.gens++
	u.gen = s.gens
	if s.gens > 1 {
		s.metrics.UpstreamReconnects.Inc()
	}
	s.setUp(u)
	s.core.UpstreamConnected(u.eff, u.gen, time.Now())
	s.mu.Unlock()
	s.apply(u.eff, u, nil)

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

// route hands one upstream frame, buf[frameHeadroom:], to the routing
// core: scanned here, outside the lock (a large answer by its head only:
// its result is forwarded unscanned), then routed by core.UpstreamFrame.
// It reports whether buf was lent to a client (see deliver), or handed to
// the fan-out goroutine with the deliveries that borrow from it (handOff);
// otherwise nothing keeps a reference to it.
func (s *Server) route(u *upstreamConn, buf []byte) (lent bool) {
	frame := buf[frameHeadroom:]
	var (
		f   router.Frame
		err error
	)
	if m, ok := scanLarge(frame); ok {
		u.msgs = append(u.msgs[:0], m)
		f.Messages = u.msgs
	} else {
		f, err = router.ScanUpstream(frame, u.msgs)
		u.msgs = f.Messages
	}
	now := time.Now()
	s.mu.Lock()
	s.core.UpstreamFrame(u.eff, u.gen, frame, f, err, now)
	s.mu.Unlock()
	clear(u.msgs)
	if s.handOff(u, buf) {
		return true
	}
	return s.apply(u.eff, u, buf)
}

// scanLarge routes an answer larger than inlineSpliceMax by its head, so
// that its result is not scanned (router.ScanResponseHead).
func scanLarge(frame []byte) (router.Message, bool) {
	if len(frame) <= inlineSpliceMax {
		return router.Message{}, false
	}
	return router.ScanResponseHead(frame)
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

// inlineSpliceMax is the largest answer that is copied for its client; a
// larger one is lent where it can be (deliver).
const inlineSpliceMax = 16 << 10

// upstreamLost tells the core that u has failed: its pending table is
// discarded whole (core.UpstreamLost).
func (s *Server) upstreamLost(u *upstreamConn) {
	s.mu.Lock()
	if s.up == u {
		s.setUp(nil)
	}
	s.core.UpstreamLost(u.eff, u.gen, time.Now())
	s.mu.Unlock()
	s.apply(u.eff, nil, nil)
}

// loggedDrop logs a dropped upstream message (the core counted it), at most
// once a second per reason so that a misbehaving node cannot flood the log.
func (s *Server) loggedDrop(r DropReason, msg string, args ...any) {
	if s.dropLog.allow(r, time.Now()) {
		s.log.Warn(msg, append(args, "reason", r.String())...)
	}
}

// dropLimiter allows one log line per reason per second.
type dropLimiter struct {
	mu   sync.Mutex
	last [core.NumDropReasons]time.Time
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
