package mux

import (
	"sync"
	"time"

	"github.com/muxd/muxd/core"
)

// lineLimiter lets through one log line per kind per second, for the lines
// a peer could otherwise repeat without end: dropped upstream messages (a
// misbehaving node, by core.DropReason) and the warnings a client can
// cause at will (core.Note.Limited). It counts the lines it left out of
// each kind since the last one let through. K is a small enumeration; the
// zero value is ready. Safe for concurrent use.
type lineLimiter[K ~uint8] struct {
	mu    sync.Mutex
	state [256]lineState // by kind
}

type lineState struct {
	last       time.Time // when a line of this kind was last let through
	suppressed int       // lines left out since
}

// allow reports whether a line of kind k may be logged at now, and if so
// how many were left out before it.
func (l *lineLimiter[K]) allow(k K, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := &l.state[k]
	if !st.last.IsZero() && now.Sub(st.last) < time.Second {
		st.suppressed++
		return false, 0
	}
	suppressed = st.suppressed
	*st = lineState{last: now}
	return true, suppressed
}

// loggedDrop logs a dropped upstream message (the core counted it), at most
// once a second per reason so that a misbehaving node cannot flood the log.
func (s *Server) loggedDrop(r DropReason, msg string, args ...any) {
	if ok, _ := s.dropLog.allow(r, time.Now()); ok {
		s.log.Warn(msg, append(args, "reason", r.String())...)
	}
}

// loggedLimited logs a warning of kind k, one a client can cause at will,
// at most once a second, saying how many were left out since the last.
func (s *Server) loggedLimited(k core.LimitedNote, msg string, args ...any) {
	ok, suppressed := s.noteLog.allow(k, time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	s.log.Warn(msg, args...)
}
