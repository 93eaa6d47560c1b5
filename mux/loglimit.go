package mux

import (
	"sync"
	"time"
)

// noteLimiter lets through one line per message text per second for the
// warnings a client can cause at will (core.Note.Limited): the node
// refusing a subscription whose params the client chose, for one. The
// next line let through says how many were left out since the last one.
// Safe for concurrent use; the set of texts is the core's constants.
type noteLimiter struct {
	mu    sync.Mutex
	state map[string]noteState
}

type noteState struct {
	last       time.Time // when a line of this text was last logged
	suppressed int       // lines left out since
}

// allow reports whether a line of text msg may be logged at now, and if so
// how many were left out before it.
func (l *noteLimiter) allow(msg string, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == nil {
		l.state = make(map[string]noteState)
	}
	st := l.state[msg]
	if !st.last.IsZero() && now.Sub(st.last) < time.Second {
		st.suppressed++
		l.state[msg] = st
		return false, 0
	}
	l.state[msg] = noteState{last: now}
	return true, st.suppressed
}

// loggedLimited logs a warning of the kind noteLimiter bounds.
func (s *Server) loggedLimited(msg string, args ...any) {
	ok, suppressed := s.noteLog.allow(msg, time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	s.log.Warn(msg, args...)
}
