package mux

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/failover"
	"github.com/muxd/muxd/reconnect"
	"github.com/muxd/muxd/router"
)

// upstreamConn is one connection to an upstream node. Any goroutine may
// send on it (send, through sq, makes one goroutine at a time its writer);
// exactly one goroutine, serveUpstream, reads it.
type upstreamConn struct {
	*reconnect.Conn
	ctx  context.Context
	srv  *Server
	node *upstreamNode
	// fc is the connection as failover.Upstreams knows it: its core
	// number (gen), whether it drains, its health state and head. Set
	// before its reader starts; what it holds is guarded by srv.mu.
	fc *failover.Conn
	// retired is set when muxd closes the connection on purpose (drained
	// after a switch), so that its end is not reported as a loss.
	retired atomic.Bool
	msgs    []router.Message // scan buffer, owned by the reader
	eff     *core.Effects    // the reader's core effects, owned by the reader
	fe      failover.Effects // the reader's failover effects, owned by the reader
	failed  sync.Once
	sq      sendQueue // the messages to write, and who writes them
}

// gen is the core's number for u, given when it is first made active (0
// until then). Read under srv.mu, or by a goroutine that took u as the
// active connection under it (it was given before).
func (u *upstreamConn) gen() uint64 { return u.fc.Gen() }

// serveUpstream runs for the life of one connection of upstream n: it
// tells failover.Upstreams, which may make it active (the core then
// resubscribes and sends what was waiting for it), sends its health
// requests, and then reads and routes every message in arrival order until
// the connection fails.
func (s *Server) serveUpstream(ctx context.Context, n *upstreamNode, rc *reconnect.Conn) error {
	u := &upstreamConn{Conn: rc, ctx: ctx, srv: s, node: n, eff: new(core.Effects)}
	n.dials++
	if n.dials > 1 {
		s.metrics.UpstreamReconnects.Inc()
	}
	now := time.Now()
	s.mu.Lock()
	fc, cerr := s.ups.Connected(&u.fe, n.set.sel, n.index, now)
	if cerr != nil {
		s.mu.Unlock()
		return fmt.Errorf("mux: %w", cerr)
	}
	u.fc = fc
	n.conn, n.reached = u, false
	to := s.upstreamDoneLocked(&u.fe)
	s.core.Dialing(s.dialReachedLocked())
	s.mu.Unlock()
	s.upstreamDone(&u.fe, u, to)

	err := s.readUpstream(ctx, u)
	s.upstreamLost(u)
	if u.retired.Load() {
		return fmt.Errorf("%w (drained after a switch): %w", reconnect.ErrRetired, err)
	}
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
	// next frame takes another from the pool. A message past the read
	// limit is kept only up to it and answered by tooLarge.
	var buf []byte
	for {
		_, r, err := u.Reader(context.Background())
		tooLarge := false
		if err == nil {
			u.Reading(true) // keepalive: a pong may come behind this message
			buf, tooLarge, err = s.frames.readFrame(buf, r, s.cfg.UpstreamReadLimit)
		}
		if err != nil {
			return fmt.Errorf("read upstream: %w", err)
		}
		lent := false
		if tooLarge {
			s.tooLarge(u, buf[frameHeadroom:])
		} else {
			s.metrics.UpstreamFramesIn.Inc()
			lent = s.route(u, buf)
		}
		// Only now that an answer in it was reported (Answered): keepalive
		// must never see the message end without its answer.
		u.Reading(false)
		switch {
		case lent:
			// A large answer lent to its client: the client's writer,
			// just woken, waits in this P's runnext slot until the
			// reader blocks, which a reader with the next large answer
			// already in the socket does only after reading much of
			// it, while the answer sits written to nobody. Yield so
			// that the writer starts now; the node keeps sending into
			// the socket's buffer meanwhile.
			if len(buf) > frameHeadroom+inlineSpliceMax {
				runtime.Gosched()
			}
			buf = nil
		case cap(buf) > maxKeptUpstreamBuf:
			s.frames.put(buf)
			buf = nil
		}
	}
}

// route hands one upstream frame, buf[frameHeadroom:], to
// failover.Upstreams: scanned here, outside the lock (a large answer by
// its head only: its result is forwarded unscanned), then given to it in
// one event under the lock (Upstreams.Frame: muxd's own messages it takes,
// the rest it routes through core.UpstreamFrame), then its effects carried
// out. It reports whether buf was lent to a client (see deliver), or
// handed to the fan-out goroutine with the deliveries that borrow from it
// (handOff); otherwise nothing keeps a reference to it.
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
	if len(f.Messages) > 0 && f.Messages[0].HasID() {
		u.Answered() // keepalive: the node hears us
	}
	now := time.Now()
	var pushRead time.Time // a push's, for muxd_push_delivery_lag_seconds
	if err == nil && !f.Batch && len(f.Messages) == 1 && !f.Messages[0].HasID() && f.Messages[0].Subscription.Present() {
		pushRead = now
	}
	s.mu.Lock()
	s.ups.Frame(u.eff, &u.fe, u.fc, frame, f, err, now)
	cur := s.up // answers on a draining connection may send on the active one
	to := s.upstreamDoneLocked(&u.fe)
	s.mu.Unlock()
	clear(u.msgs)
	defer s.upstreamDone(&u.fe, u, to)
	if len(u.eff.Deliveries) == 0 {
		pushRead = time.Time{} // routed to nobody
	}
	if s.handOff(u, cur, buf, pushRead) {
		return true
	}
	lent = s.apply(u.eff, cur, buf)
	s.pushDelivered(pushRead)
	return lent
}

// pushDelivered observes the delivery lag of a push read at read, now that
// its deliveries are queued (zero read: none to observe).
func (s *Server) pushDelivered(read time.Time) {
	if !read.IsZero() {
		s.metrics.ops.pushLag.Observe(time.Since(read).Seconds())
	}
}

// tooLarge handles a message from u past the upstream read limit, of which
// head is what was kept (the rest was read and thrown away): the requests
// it answered each get -32005 (core.UpstreamTooLarge, through
// failover.Upstreams.TooLarge), and the connection goes on. Whom it
// answered comes from its id (router.TruncatedResponseID). A message whose
// id is not in head, or not one of the core's, is counted and logged; its
// requests get -32002 at their deadline. So do those of a message that head
// shows ambiguous (a member twice, or named like a JSON-RPC member but for
// case or escapes): it is nobody's answer, and is counted malformed, as the
// core counts a whole one.
func (s *Server) tooLarge(u *upstreamConn, head []byte) {
	s.metrics.limit("upstream_read")
	span, inArray, err := router.TruncatedResponseID(head)
	var uid uint64
	ok := err == nil
	if ok {
		uid, ok = router.ParseUpstreamID(span.In(head))
	}
	switch {
	case ok:
		u.Answered() // keepalive: the node hears us
	case errors.Is(err, router.ErrAmbiguous):
		u.Answered() // an answer, though to no one muxd can tell
		s.metrics.drop(DropMalformed)
		s.loggedDrop(DropMalformed, "upstream message past upstream_read_limit thrown away, one that can be read more than one way: routed to no one (its requests get -32002 at their deadline)",
			"limit", s.cfg.UpstreamReadLimit, "problem", err)
		return
	default:
		s.log.Warn("upstream message past upstream_read_limit thrown away, with no id in its first bytes (a push, or an answer whose id follows a result longer than that: its request gets -32002 at its deadline)",
			"limit", s.cfg.UpstreamReadLimit)
		return
	}
	now := time.Now()
	s.mu.Lock()
	s.ups.TooLarge(u.eff, &u.fe, u.fc, uid, inArray, now)
	cur := s.up
	to := s.upstreamDoneLocked(&u.fe)
	s.mu.Unlock()
	s.apply(u.eff, cur, nil)
	s.upstreamDone(&u.fe, u, to)
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

// upstreamLost tells failover.Upstreams that u has ended: when it was
// active or draining, the core discards its pending table whole
// (core.UpstreamLost), and another upstream may be made active.
func (s *Server) upstreamLost(u *upstreamConn) {
	now := time.Now()
	s.mu.Lock()
	if u.node.conn == u {
		u.node.conn = nil
	}
	if s.up == u {
		s.setUp(nil)
	}
	s.ups.Lost(u.eff, &u.fe, u.fc, now)
	to := s.upstreamDoneLocked(&u.fe)
	cur := s.up
	s.mu.Unlock()
	s.apply(u.eff, cur, nil)
	s.upstreamDone(&u.fe, nil, to)
}
