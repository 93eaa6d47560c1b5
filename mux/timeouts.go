package mux

import (
	"context"
	"time"
)

// sweepInterval is how often deadlines are checked: a twentieth of the
// request timeout, within [5ms, 250ms], so a timeout fires at most that late.
func sweepInterval(timeout time.Duration) time.Duration {
	return min(max(timeout/20, 5*time.Millisecond), 250*time.Millisecond)
}

// sweepLoop gives the core the time (core.Tick) until ctx is done, which
// answers expired requests and runs the backfill timers. Deadlines live
// there and not as contexts on the shared socket: in coder/websocket an
// expired context on a Read or Write closes the connection.
func (s *Server) sweepLoop(ctx context.Context) {
	every(ctx, sweepInterval(s.cfg.RequestTimeout), s.tick)
}

// every calls fn with the time every d until ctx is done.
func every(ctx context.Context, d time.Duration, fn func(now time.Time)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			fn(now)
		}
	}
}

// tick is one sweep. Only sweepLoop calls it: s.sweep is its own.
func (s *Server) tick(now time.Time) {
	s.mu.Lock()
	s.core.Tick(&s.sweep, now)
	up := s.up
	s.mu.Unlock()
	s.apply(&s.sweep, up, nil)
}
