package mux

import (
	"time"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/router"
)

// dispatch hands one frame from client c to the routing core: scanned here,
// outside the lock, then admitted by core.ClientFrame, whose effects (the
// client's own answers, frames for the upstream) are carried out after the
// lock is released. It never blocks on another client, and on the upstream
// only while its send queue is full (applyClient: backpressure). It
// reports whether an answer will be sent (false for notifications only),
// for HTTP, which must answer an empty 200 then. dispatch keeps no
// reference to frame once it returns: the readers reuse its buffer.
func (s *Server) dispatch(c *Client, frame []byte) bool {
	f, err := router.ScanClient(frame, c.scan)
	c.scan = reuse(f.Messages, maxKeptScan) // a big batch's is let go
	now := time.Now()
	s.mu.Lock()
	if c.sealed {
		// Read after the session was set to close: not taken (finished).
		s.mu.Unlock()
		return false
	}
	answers := s.core.ClientFrame(&c.eff, c.id, frame, f, err, now)
	up := s.up
	s.mu.Unlock()
	s.applyClient(&c.eff, up)
	return answers
}

// refuse answers a frame the session refused before scanning it (over the
// message size limit) with e.
func (s *Server) refuse(c *Client, id []byte, e router.RPCError) {
	s.mu.Lock()
	if c.sealed {
		s.mu.Unlock()
		return
	}
	s.core.Refuse(&c.eff, c.id, id, e)
	s.mu.Unlock()
	s.apply(&c.eff, nil, nil)
}

// refuseTooLarge counts and refuses a client message over
// max_message_bytes, under its request's id (nil: null).
func (s *Server) refuseTooLarge(c *Client, id []byte) {
	s.metrics.limit("message_size")
	s.refuse(c, id, core.ErrMessageTooLarge)
}

// maxKeptScan is the largest scan buffer a session keeps between frames,
// in messages. append rounds a growing slice up to its size class, so the
// buffer of a common batch (10 messages take a capacity of 18) is within
// it and kept, not regrown for every batch.
const maxKeptScan = 64
