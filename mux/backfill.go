package mux

import (
	"time"

	"github.com/muxd/muxd/gapfill"
	"github.com/muxd/muxd/router"
)

// This file is the thin layer between the server and package gapfill,
// which decides (with no I/O) what a subscription key has missed and how to
// fill it. Every function here runs with s.mu held and only turns the
// machine's events and effects into the server's terms:
//
//   - events: a push for a live key (routePush), a key becoming live
//     (subscribedLocked), the answer to one of the machine's requests
//     (routeResponse, Kind router.KindBackfill), the sweep's tick, the
//     connection lost (upstreamLost), a key's last subscriber gone
//     (detachLocked);
//   - effects: requests sent as muxd's own (router.Internal, with a
//     deadline so the pending table cannot keep them), pushes fanned out to
//     the key's members in order, counters.
//
// When the routing moves into the sans-I/O core, this file is what goes
// with it.

// newGapMachine builds the machine for cfg; timeout bounds each of its
// requests.
func newGapMachine(cfg Config, timeout time.Duration) *gapfill.Machine {
	return gapfill.New(gapfill.Config{
		Blocks:         cfg.BackfillBlocks, // negative: off
		RequestTimeout: timeout,
		JobTimeout:     6 * timeout,
	})
}

// livePush is the push an event was about, as the node sent it: elem is
// the message, at its params.subscription.
type livePush struct {
	elem []byte
	at   router.Span
}

// applyGapLocked carries out the machine's effects. live is the push of
// the event (nil for other events).
func (s *Server) applyGapLocked(e gapfill.Effects, live *livePush, out *outgoing) {
	now := time.Now()
	for _, r := range e.Sends {
		if s.up == nil {
			// No connection: the machine times it out and retries or
			// gives up (in practice it is told of the loss first).
			continue
		}
		uid := s.reqs.Next()
		s.gapReqs[uid] = r.ID
		s.enqueueLocked(nil, uid, router.Pending{
			Client:   router.Internal,
			Method:   r.Method,
			Sent:     now,
			Deadline: now.Add(s.gapTimeout),
			Frame:    router.AppendRequest(nil, uid, r.Method, r.Params),
			Kind:     router.KindBackfill,
			Key:      r.Key,
		}, s.up, out)
	}
	for _, d := range e.Deliveries {
		sh := s.subs.Key(d.Key)
		if sh == nil {
			continue
		}
		if d.Live {
			if live != nil {
				s.fanoutLocked(sh, live.elem, live.at)
			}
			continue
		}
		elem, at := gapPushFrame(d.Result)
		s.fanoutLocked(sh, elem, at)
	}
	if e.HeadsBackfilled > 0 {
		s.metrics.BackfilledHeads.Add(float64(e.HeadsBackfilled))
	}
	if e.LogsBackfilled > 0 {
		s.metrics.BackfilledLogs.Add(float64(e.LogsBackfilled))
	}
	for _, g := range e.Gaps {
		s.metrics.BackfillGaps.WithLabelValues(g.Kind, g.Reason).Inc()
		s.log.Warn("subscription gap not closed", "kind", g.Kind, "reason", g.Reason)
	}
	for _, d := range e.Durations {
		s.metrics.BackfillDuration.Observe(d.Seconds())
	}
}

// gapPushFrame builds an eth_subscription push for result as geth lays one
// out; the subscription id is a placeholder at the returned span, which
// the fan-out replaces with each member's id.
func gapPushFrame(result []byte) ([]byte, router.Span) {
	const head = `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":`
	const placeholder = `""`
	b := make([]byte, 0, len(head)+len(placeholder)+len(`,"result":`)+len(result)+2)
	b = append(b, head...)
	at := router.Span{Off: len(b), Len: len(placeholder)}
	b = append(b, placeholder...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	b = append(b, "}}"...)
	return b, at
}

// backfillAnsweredLocked hands the node's answer to a backfill request to
// the machine.
func (s *Server) backfillAnsweredLocked(frame []byte, m *router.Message, uid uint64, out *outgoing) {
	id, ok := s.gapReqs[uid]
	if !ok {
		return
	}
	delete(s.gapReqs, uid)
	var result []byte
	if m.Result.Present() && !m.Error.Present() {
		result = m.Result.In(frame)
	}
	s.applyGapLocked(s.gap.Answer(id, result, time.Now()), nil, out)
}
