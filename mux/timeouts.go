package mux

import (
	"context"
	"time"

	"github.com/muxd/muxd/router"
)

// sweepInterval is how often deadlines are checked: a twentieth of the
// request timeout, within [5ms, 250ms], so a timeout fires at most that late.
func sweepInterval(timeout time.Duration) time.Duration {
	return min(max(timeout/20, 5*time.Millisecond), 250*time.Millisecond)
}

// sweepLoop answers expired requests until ctx is done. Deadlines live here
// and not as contexts on the shared socket: in coder/websocket an expired
// context on a Read or Write closes the connection.
func (s *Server) sweepLoop(ctx context.Context) {
	t := time.NewTicker(sweepInterval(s.cfg.RequestTimeout))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.sweep(now)
		}
	}
}

// errNoUpstream answers a request that waited UpstreamWait for an upstream.
var errNoUpstream = router.ErrorUnavailable.Because("no upstream connected")

// sweep answers every request whose deadline has passed with -32002
// "request timed out", whether it is in flight upstream, waiting for an
// upstream, or a subscription waiting for the node's answer. An answer that
// comes later finds nothing and is dropped.
func (s *Server) sweep(now time.Time) {
	var (
		expired []router.Pending
		next    [][]byte // later arrays of batches whose array in flight expired
	)
	s.mu.Lock()
	s.reqs.Expire(now, func(id uint64, p router.Pending) {
		s.settledLocked(p)
		if p.Kind == router.KindBackfill {
			// The gap machine times it out itself (Tick below).
			delete(s.gapReqs, id)
			return
		}
		if p.Up != nil && p.Up.Settle(id) {
			next = p.Up.NextArrays(next, s.cfg.UpstreamMaxBatch)
		}
		expired = append(expired, p)
	})
	kept := s.waiting[:0]
	var gaveUp []router.Pending
	for _, w := range s.waiting {
		timedOut := !w.p.Deadline.IsZero() && !w.p.Deadline.After(now)
		if !timedOut && (w.giveUp.IsZero() || w.giveUp.After(now)) {
			kept = append(kept, w)
			continue
		}
		s.settledLocked(w.p)
		if w.p.Up != nil {
			w.p.Up.Settle(w.id) // not sent yet: its array will leave it out
		}
		switch {
		case w.p.Kind != router.KindCall:
		case timedOut:
			expired = append(expired, w.p)
		default:
			gaveUp = append(gaveUp, w.p)
		}
	}
	clear(s.waiting[len(kept):])
	s.waiting = kept
	expired = s.expireWaitersLocked(now, expired)
	if len(expired) > 0 {
		s.updateSubGaugesLocked()
	}
	for _, p := range expired {
		if c := s.clients[p.Client]; c != nil {
			s.deliverLocked(c, p, router.ErrorResponse(p.ID, router.ErrorTimeout), router.CodeUnavailable)
		}
	}
	for _, p := range gaveUp {
		if c := s.clients[p.Client]; c != nil {
			s.deliverLocked(c, p, router.ErrorResponse(p.ID, errNoUpstream), router.CodeUnavailable)
		}
	}
	var out outgoing
	s.applyGapLocked(s.gap.Tick(now), nil, &out)
	up := s.up
	s.mu.Unlock()
	up.send(next...)
	up.send(out.frames...)
}
