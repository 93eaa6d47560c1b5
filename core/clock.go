package core

import (
	"time"

	"github.com/muxd/muxd/router"
)

// errNoUpstream answers a request that waited UpstreamWait for an upstream.
var errNoUpstream = router.ErrorUnavailable.Because("no upstream connected")

// Tick is the event of time passing: every request whose deadline is not
// after now gets -32002 "request timed out", whether it is in flight
// upstream, waiting for an upstream, or a subscription waiting for the
// node's answer; a request that waited UpstreamWait for an upstream gets
// -32002 "no upstream connected" as waiting.go's rule says (stillWaits). An
// answer that comes later finds nothing and is dropped. The gap machine's
// timers run too.
func (c *Core) Tick(e *Effects, now time.Time) {
	e.Reset()
	defer c.finish(e)
	var expired, gaveUp []router.Pending
	var next []*router.UpstreamBatch // arrays whose one in flight is settled now
	c.reqs.Expire(now, func(id uint64, p router.Pending) {
		c.settled(&p)
		c.freeSlot(id)
		c.coal.left(id) // its call, if any, goes on for the others
		switch p.Kind {
		case router.KindBackfill:
			// The gap machine times it out itself (Tick below).
			delete(c.gapReqs, id)
			c.historySettled(id)
			c.historyExpired(e, id, "the node did not answer the history check in time", now)
			return
		case router.KindFinalized:
			c.fin.asking = 0 // the next head asks again
			return
		}
		if p.Up != nil && p.Up.Settle(id) {
			next = append(next, p.Up)
		}
		expired = append(expired, p)
	})
	// Only once every call that timed out is settled, so that the next
	// array leaves out those of its calls that timed out too.
	for _, u := range next {
		c.sendArrays(e, u)
	}
	expired, gaveUp = c.expireWaiting(now, expired, gaveUp)
	expired = c.expireWaiters(now, expired)
	if len(expired) > 0 {
		c.subGauges()
	}
	c.answerAll(e, expired, router.ErrorTimeout, now)
	c.answerAll(e, gaveUp, errNoUpstream, now)
	c.applyGap(e, c.gap.Tick(now), nil, now)
	c.orphans.expire(now)
	c.drained(e)
	c.ageSlots(now)
	c.dispatch(e, now) // deadlines and holds free slots
}

// expireWaiters removes the client eth_subscribe requests waiting for the
// node whose deadline is not after now, with their subscriptions, and
// appends the requests to dst, to be answered by the caller.
func (c *Core) expireWaiters(now time.Time, dst []router.Pending) []router.Pending {
	for _, mem := range c.subs.expireWaiters(now, nil) {
		c.dropSub(mem.cl, mem)
		c.ended(mem.cl, 0)
		dst = append(dst, *mem.req)
	}
	return dst
}

// answerAll answers every request of ps with err.
func (c *Core) answerAll(e *Effects, ps []router.Pending, err router.RPCError, now time.Time) {
	for i := range ps {
		p := &ps[i]
		if cl := c.clients[p.Client]; cl != nil && p.Client != router.Internal {
			c.answerOwn(e, cl, p, err, now)
		}
	}
}

// alive reports whether requests of client id still count: its session is
// open, or they are muxd's own.
func (c *Core) alive(id router.ClientID) bool {
	return id == router.Internal || c.clients[id] != nil
}

// ClientGone is the event of a session ending. Its requests are forgotten
// (those already sent become orphans, whose answers are dropped as
// DropClientGone), its
// waiting requests are left to be skipped, and its subscriptions are
// released, unsubscribing upstream those it held last.
func (c *Core) ClientGone(e *Effects, id router.ClientID, now time.Time) {
	e.Reset()
	defer c.finish(e)
	cl := c.clients[id]
	if cl == nil {
		return
	}
	delete(c.clients, id)
	c.reqs.DropClient(id, func(uid uint64, p router.Pending) {
		c.orphaned(uid, &p) // first: a coalesced call ends with its last waiter
		c.coal.left(uid)
	})
	c.dropQueued(cl) // never sent
	c.waiting.forget(cl.waiting, c.alive)
	c.obs.InFlight(-cl.inflight)
	c.owing -= cl.inflight
	if cl.named != nil {
		cl.named.inflight -= cl.inflight
		cl.named.sessions--
	}
	released := c.released
	for subID := range cl.subs {
		c.detach(e, cl, subID, now) // gives back each subscription's bytes (dropSub)
	}
	// What is left are its requests' bytes. The shell hands all it held
	// back to the OS itself (Held, asked before this event): nothing of it
	// counts as released here.
	c.released = released
	c.held -= cl.held
	cl.inflight, cl.held, cl.waiting = 0, 0, 0
	c.drained(e)
	c.dispatch(e, now)
}

// BeginShutdown stops Join from taking new sessions; from now on Effects
// report Idle once nothing is owed. It reports whether that is already so.
func (c *Core) BeginShutdown() (idle bool) {
	c.closing = true
	return c.owing == 0 && c.waiting.live == 0
}

// Shutdown answers every request still owed an answer (in flight, waiting
// for an upstream, or waiting on a subscription) with err, and returns how
// many; used when the server stops. It also makes the core shut, for good:
// Join takes no session, and ClientFrame answers every request from then
// on (each batch element with an id, eth_subscribe and eth_unsubscribe
// too) with err at once and drops notifications (DropNoUpstream), so that
// nothing of a client's goes upstream any more and a session that goes on
// sending is never owed an answer beyond the event that read its request.
// What muxd answers without the node (parse errors, invalid requests,
// denied methods) is answered as always.
func (c *Core) Shutdown(e *Effects, err router.RPCError, now time.Time) int {
	e.Reset()
	defer c.finish(e)
	c.closing, c.shut, c.shutErr = true, true, err
	var done []router.Pending
	c.reqs.Discard(func(_ uint64, p router.Pending) {
		c.settled(&p)
		done = append(done, p)
	})
	c.coal.reset()
	c.resetSlots()
	for _, w := range c.waiting.take() {
		if !c.alive(w.p.Client) {
			continue
		}
		if cl := c.clients[w.p.Client]; cl != nil {
			cl.waiting--
		}
		c.settled(&w.p)
		done = append(done, w.p)
	}
	done = c.expireWaiters(time.Unix(1<<40, 0), done) // every waiter
	c.subGauges()
	n := 0
	for i := range done {
		p := &done[i]
		if cl := c.clients[p.Client]; cl != nil && p.Client != router.Internal {
			c.answerOwn(e, cl, p, err, now)
			n++
		}
	}
	return n
}
