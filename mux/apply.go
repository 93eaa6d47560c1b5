package mux

import (
	"bytes"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/router"
)

// apply carries out the effects of one core event (core.Effects), after
// s.mu is released: deliveries are queued for their clients (copies and
// splices made here or in each client's writer, never under s.mu), slow
// clients are cut, frames go upstream on up (the connection that was
// current during the event), and notes are logged. buf is the upstream
// frame buffer the event's frame lies in, after frameHeadroom bytes (nil
// for other events); apply reports whether it lent buf to a client, which
// then owns it until its writer gives it back to the pool.
//
// apply never waits for room in up's send queue. It runs on the upstream
// reader, the fan-out goroutine, the sweep, the connections' dial and
// failover goroutines, shutdown (failAll) and a session's end
// (removeClient: the client's unsubscribes, at most max_subscriptions),
// none of which may stop while the node is slow to read: the reader
// waiting on the node's reading would stop every answer and push behind
// it. What a client's frames send goes through applyClient, which waits.
func (s *Server) apply(e *core.Effects, up *upstreamConn, buf []byte) (lent bool) {
	return s.carryOut(e, up, buf, false)
}

// applyClient is apply for the effects of a client's frame, on that
// client's reader: its frames upstream wait while the send queue is full,
// which is the backpressure that bounds what clients make muxd hold for a
// node that is slow to read.
func (s *Server) applyClient(e *core.Effects, up *upstreamConn) {
	s.carryOut(e, up, nil, true)
}

// carryOut is apply; wait says whether frames upstream may wait for room in
// the send queue.
func (s *Server) carryOut(e *core.Effects, up *upstreamConn, buf []byte, wait bool) (lent bool) {
	s.reclaim.released(e.Released)
	if len(e.Deliveries) > 0 {
		lent = s.deliver(e.Deliveries, buf)
	}
	for _, id := range e.Slow {
		if c := s.peer(id); c != nil {
			c.slowConsumer("subscription pushes held past outbound_queue_bytes")
		}
	}
	if len(e.Upstream) > 0 && up != nil && up.gen() == e.Gen {
		if wait {
			up.send(e.Upstream...)
		} else {
			up.sendNoWait(e.Upstream...)
		}
	}
	if len(e.Close) > 0 {
		s.closeGens(e.Close)
	}
	for i := range e.Notes {
		n := &e.Notes[i]
		switch {
		case n.Drop:
			s.loggedDrop(n.Reason, n.Msg, n.Args...)
		case n.Limited != core.NotLimited:
			s.loggedLimited(n.Limited, n.Msg, n.Args...)
		case n.Info:
			s.log.Info(n.Msg, n.Args...)
		default:
			s.log.Warn(n.Msg, n.Args...)
		}
	}
	if e.Idle {
		s.mu.Lock()
		s.idleNowLocked()
		s.mu.Unlock()
	}
	return lent
}

// peer returns the session with id id, or nil once it has gone.
func (s *Server) peer(id router.ClientID) *Client {
	s.peersMu.RLock()
	defer s.peersMu.RUnlock()
	return s.peers[id]
}

// deliver queues each delivery for its client. A message that borrows from
// buf is copied, except a large answer that is its frame's only message:
// its id is spliced in place and the client is handed buf itself. A push
// shared by many subscribers is copied once, and each client's writer
// splices its own subscription id in.
func (s *Server) deliver(ds []core.Delivery, buf []byte) (lent bool) {
	var (
		src    *byte  // the borrowed shared push last copied
		shared []byte // its copy
	)
	s.peersMu.RLock()
	defer s.peersMu.RUnlock()
	for i := range ds {
		d := &ds[i]
		c := s.peers[d.Client]
		if c == nil {
			continue
		}
		m := outMsg{msg: d.Msg, arena: d.Arena, push: d.Push}
		switch {
		case d.ID == nil:
			if d.Borrowed {
				m.msg = bytes.Clone(d.Msg)
			}
		case d.Shared:
			m.at, m.id = d.At, d.ID
			if d.Borrowed {
				if src != &d.Msg[0] {
					src, shared = &d.Msg[0], bytes.Clone(d.Msg)
				}
				m.msg = shared
			}
		default:
			// A large answer that is its frame's only message keeps its
			// buffer: the splice moves the few bytes before the id, not
			// the answer. Anything else is copied with its id spliced.
			if d.Borrowed && d.Lendable && buf != nil && len(d.Msg) > inlineSpliceMax {
				if resp, ok := spliceInPlace(buf, frameHeadroom+d.Off, len(d.Msg), d.At, d.ID); ok {
					m.msg, m.lent, lent = resp, buf, true
					break
				}
			}
			m.msg = router.AppendSpliced(make([]byte, 0, len(d.Msg)-d.At.Len+len(d.ID)), d.Msg, d.At, d.ID)
		}
		c.send(d.Seq, m)
	}
	return lent
}
