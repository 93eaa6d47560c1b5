package mux

import (
	"sync"
	"time"

	"github.com/muxd/muxd/core"
)

// noteLimiter lets through one line per kind per second of the warnings a
// client can cause at will (core.Note.Limited): the node refusing a
// subscription whose params the client chose, for one. The next line let
// through says how many were left out since the last one. Safe for
// concurrent use.
type noteLimiter struct {
	mu    sync.Mutex
	state [core.NumLimitedNotes]noteState
}

type noteState struct {
	last       time.Time // when a line of this kind was last logged
	suppressed int       // lines left out since
}

// allow reports whether a line of kind k may be logged at now, and if so
// how many were left out before it.
func (l *noteLimiter) allow(k core.LimitedNote, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := &l.state[k]
	if !st.last.IsZero() && now.Sub(st.last) < time.Second {
		st.suppressed++
		return false, 0
	}
	suppressed = st.suppressed
	*st = noteState{last: now}
	return true, suppressed
}

// loggedLimited logs a warning of kind k, which noteLimiter bounds.
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
