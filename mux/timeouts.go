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

// dialGrace is how long past upstream_wait a request may still wait for a
// dial's verdict when none comes (core.Config.DialGrace): a dial hanging on
// an address that does not answer. The dials made while requests wait, one
// every reconnect.DefaultHurryInterval, give one well within it from a node
// that refuses or answers.
const dialGrace = time.Second

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

// tick is one sweep. Only sweepLoop calls it: s.sweep is its own. While
// requests wait for an upstream it hurries the dials (hurryDialsLocked).
func (s *Server) tick(now time.Time) {
	s.mu.Lock()
	s.core.Tick(&s.sweep, now)
	s.hurryDialsLocked()
	up := s.up
	s.mu.Unlock()
	s.apply(&s.sweep, up, nil)
}
