package core

import (
	"time"

	"github.com/muxd/muxd/router"
)

// UpstreamConnected is the event of connection gen (never 0, each new one
// larger than the last) becoming the current one. Subscriptions are sent
// first, so that a burst of waiting requests does not keep the node from
// hearing the resubscribes before the next drop; then what waited.
func (c *Core) UpstreamConnected(e *Effects, gen uint64, now time.Time) {
	e.Reset()
	c.connected(e, gen, now)
}

// connected makes gen the current connection (UpstreamConnected, without
// resetting e).
func (c *Core) connected(e *Effects, gen uint64, now time.Time) {
	c.gen, c.since = gen, now
	c.resubscribe(e, now)
	resubscribed := len(e.Upstream)
	waiting := c.waiting.take()
	sent := 0
	var lastBatch *router.UpstreamBatch
	for _, w := range waiting {
		if !c.alive(w.p.Client) {
			continue // its client left
		}
		if cl := c.clients[w.p.Client]; cl != nil {
			cl.waiting--
		}
		sent++
		if w.p.Up == nil {
			// Identical requests that waited go as one call, and past
			// the bound on calls at the node they queue for a slot.
			c.forwardOrQueue(e, w.id, w.p, now)
			continue
		}
		c.reqs.Add(w.id, w.p)
		if !w.p.Up.Started() && w.p.Up != lastBatch {
			// A batch's requests wait together, in order: its array
			// goes (or queues) where its first request stood.
			lastBatch = w.p.Up
			c.sendOrQueueBatch(e, w.p.Client, w.p.Up, now)
		}
	}
	e.Gen = gen
	e.info("upstream session started", "gen", gen, "sent_waiting", sent, "resubscribed", resubscribed)
}

// UpstreamLost is the event of connection gen failing. Its pending table
// is discarded whole: nothing that was in flight on it can be delivered
// afterwards. Requests on the retry list (and those of a batch's later
// array, which the node never saw) go back to the waiting queue under their
// upstream id while their deadline allows; every other request fails at
// once with -32002 "connection lost", because it may or may not have been
// executed. Requests that waited on one coalesced call are each retried or
// failed like that, and coalesced again on the next connection; the
// coalescing table, the head view and the cache are emptied. The loss of
// a connection muxd moved away from (UpstreamSwitch) fails the requests
// left to it the same way; any other connection that is not the current
// one changes nothing.
func (c *Core) UpstreamLost(e *Effects, gen uint64, now time.Time) {
	e.Reset()
	defer c.finish(e)
	if gen != 0 && gen == c.drain.gen {
		c.failDrain(e, now)
		return
	}
	if gen != c.gen {
		return
	}
	c.lose(e, now, "upstream lost", c.drain.holds)
}

// lose discards the current connection's pending table (UpstreamLost),
// except the requests keep returns true for, which stay in the table
// (those of a drained connection, and those UpstreamSwitch leaves to the
// connection it moves from). It returns the upstream ids of the entries
// kept.
func (c *Core) lose(e *Effects, now time.Time, why string, keep func(id uint64, p *router.Pending) bool) []uint64 {
	gen := c.gen
	c.gen = 0
	var failed []router.Pending
	var kept []uint64
	var keptP []router.Pending
	retried := 0
	// A batch's retried requests go again as one array, in order, under
	// their upstream ids; Discard hands them over in id order.
	regrouped := map[*router.UpstreamBatch]*router.UpstreamBatch{}
	c.reqs.Discard(func(id uint64, p router.Pending) {
		if keep(id, &p) {
			kept = append(kept, id)
			keptP = append(keptP, p)
			return
		}
		if p.Kind != router.KindCall {
			c.settled(&p)
			return // subscriptions are redone on the next connection
		}
		// A request of a batch's later array was never sent: the node
		// cannot have run it, so it is sent again whatever its method.
		// Nor a call queued for a slot (fairshare.go).
		unsent := (p.Up != nil && !p.Up.Sent(id)) || c.queuedUnsent(id)
		if (unsent || c.policy.retryable(p.Method)) && now.Before(p.Deadline) && !c.waiting.full(c.cfg.MaxWaiting) {
			if p.Up != nil {
				ng := regrouped[p.Up]
				if ng == nil {
					ng = new(router.UpstreamBatch)
					regrouped[p.Up] = ng
				}
				ng.AddCall(id, p.Frame)
				p.Up = ng
			}
			c.waiting.add(waitingRequest{id, p, now.Add(c.cfg.UpstreamWait)})
			if cl := c.clients[p.Client]; cl != nil {
				cl.waiting++
			}
			retried++
			return
		}
		failed = append(failed, p)
	})
	lost := router.ErrorUnavailable.Because("connection lost")
	for i := range failed {
		p := &failed[i]
		if cl := c.settled(p); cl != nil {
			c.answerOwn(e, cl, p, lost, now)
		}
	}
	c.forgetConnection()
	c.orphans.forget()
	c.resetSlots()
	c.subs.lost()
	c.subGauges()
	c.gap.Disconnected()
	clear(c.gapReqs)
	c.historyPaceLost()
	c.historyLost(e, now)
	for i, id := range kept {
		c.reqs.Add(id, keptP[i])
	}
	c.obs.Retried(retried)
	e.note(why, "gen", gen, "retrying", retried, "failed", len(failed))
	return kept
}
