package core

import (
	"time"

	"github.com/muxd/muxd/fairq"
	"github.com/muxd/muxd/router"
)

// This file is the bound on client calls at the node and the fair shares
// of it (DESIGN §5, "Never let one client hurt the others").
//
// A slot is one client call the node is running for muxd on the current
// connection: a single call sent and not yet answered, timed out or gone
// with the connection (a coalesced call is one slot however many requests
// wait on it), each call of a client batch's array in flight, its client's
// departure included (orphans.go), for at most slotHold. Subscriptions, unsubscribes and
// muxd's own requests (backfill, the finalized block, health checks) take
// no slot and never queue: they are few, muxd's to bound, and a
// subscription held back would lose pushes. The history of a subscription
// from a block is the exception: bulk traffic, paced behind every queued
// call and taking slots (histpace.go).
//
// While fewer than Config.MaxUpstreamInFlight slots are taken and nothing
// is queued, a call goes upstream as it arrives: the common path costs a
// map insert and nothing more. Otherwise it waits in its client's queue,
// in the pending table already (so that its deadline, its client leaving
// and the connection's loss treat it as any request of the table) but not
// sent; as slots free, the queues are served by deficit round robin
// (package fairq), one unit of credit per call per round, a batch costing
// its element count and going as one unit, its arrays on the one
// connection as before. A client with thousands of calls queued thus
// delays one with a single call by at most one call of each other busy
// client. The bound may be passed by one batch: a unit goes when a slot is
// free, whatever its cost.
//
// A queued call whose deadline passes gets "request timed out" from Tick as
// any other; the queue entry left behind is skipped. The queued calls of a
// client that leaves are dropped, never sent. On the connection's loss the
// queued calls (which the node never saw) go back to wait for the next
// connection whatever their method, as a batch's unsent arrays do; on a
// switch they move to the new connection.

// fairShare is the core's part of this file.
type fairShare struct {
	bound int // Config.MaxUpstreamInFlight; <= 0: no bound, no queue
	// atNode holds the upstream ids of the client calls taking a slot on
	// the current connection (orphans aside), with the time a queued one
	// was sent (zero for one sent as it arrived): its round trip starts
	// there. Kept only with a bound.
	atNode map[uint64]slot
	// queued holds the upstream ids of the single calls queued (in the
	// pending table, not sent); a batch's are known by its
	// UpstreamBatch (Sent).
	queuedIDs map[uint64]struct{}
	q         fairq.Queue[queuedCall] // the latency class: unnamed clients and names not bulk
	bulk      fairq.Queue[queuedCall] // names of the bulk class, served when q is empty
	// scratch holds the upstream ids of an array sent (tookSlots).
	scratch []uint64
}

// queuedCall is one unit of a client's queue: a single call (uid) or a
// client batch's arrays (up).
// slot is one call taking a slot: when it left its queue (zero: sent as it
// arrived), for its round trip, and when the slot was first seen taken by
// a dispatch or a Tick, for its hold (slotHold).
type slot struct {
	dispatched, seen time.Time
}

// slotHold is how long a call keeps its slot: past it the call still waits
// for its answer (until its deadline) but no longer holds others back. A
// call the node never answers, or a departed client's calls the node
// drops, would otherwise hold their slots until their deadlines
// (request_timeout, 30 s), stopping every client's calls; and a call that
// takes this long is work the node does beside the others, not a queue in
// front of them. A slot first seen by a Tick is held from that Tick.
const slotHold = 2 * time.Second

type queuedCall struct {
	uid    uint64
	up     *router.UpstreamBatch
	client router.ClientID
	at     time.Time // when it was queued
}

func newFairShare(bound int) fairShare {
	return fairShare{bound: bound, atNode: map[uint64]slot{}, queuedIDs: map[uint64]struct{}{}}
}

// slotsUsed is the slots taken: calls at the node, departed clients' calls
// included, within their hold.
func (c *Core) slotsUsed() int { return len(c.fair.atNode) }

// ageSlots frees the slots held past slotHold at now, and starts the hold
// of those not yet seen.
func (c *Core) ageSlots(now time.Time) {
	for uid, s := range c.fair.atNode {
		switch {
		case s.seen.IsZero():
			s.seen = now
			c.fair.atNode[uid] = s
		case !s.seen.Add(slotHold).After(now):
			delete(c.fair.atNode, uid)
		}
	}
}

// slotFree reports whether a call may go upstream as it arrives: there is
// no bound, or a slot is free and nobody is queued for one.
func (c *Core) slotFree() bool {
	return c.fair.bound <= 0 || (c.fair.queued() == 0 && c.slotsUsed() < c.fair.bound)
}

// queued is the units queued in both classes.
func (f *fairShare) queued() int { return f.q.Len() + f.bulk.Len() }

// push queues qc for cl at cost.
func (f *fairShare) push(cl *client, qc queuedCall, cost int) {
	flow, weight, bulk := flowOf(cl)
	q := &f.q
	if bulk {
		q = &f.bulk
	}
	q.Push(flow, weight, qc, cost)
}

// pop takes the next unit: the latency class first.
func (f *fairShare) pop() (queuedCall, bool) {
	if qc, _, ok := f.q.Pop(); ok {
		return qc, true
	}
	qc, _, ok := f.bulk.Pop()
	return qc, ok
}

// tookSlot records that the client call uid went upstream at now, from
// its queue (dispatched, for its round trip) or as it arrived (zero).
func (c *Core) tookSlot(uid uint64, dispatched, now time.Time) {
	if c.fair.bound > 0 {
		c.fair.atNode[uid] = slot{dispatched: dispatched, seen: now}
	}
}

// freeSlot records that call uid no longer runs at the node for anyone
// (answered, timed out, its client gone: an orphan takes over then), and
// returns when it was sent from its queue (zero: as it arrived, or it
// took no slot).
func (c *Core) freeSlot(uid uint64) time.Time {
	if c.fair.bound <= 0 {
		return time.Time{}
	}
	s, ok := c.fair.atNode[uid]
	if ok {
		delete(c.fair.atNode, uid)
	}
	return s.dispatched
}

// tookSlots records the calls of u's array in flight as taking slots.
func (c *Core) tookSlots(u *router.UpstreamBatch, sent time.Time) {
	if c.fair.bound <= 0 {
		return
	}
	c.fair.scratch = u.InFlight(c.fair.scratch[:0])
	for _, uid := range c.fair.scratch {
		c.fair.atNode[uid] = slot{dispatched: sent, seen: sent}
	}
}

// queuedUnsent reports whether single call uid waits in its client's queue,
// not sent.
func (c *Core) queuedUnsent(uid uint64) bool {
	_, ok := c.fair.queuedIDs[uid]
	return ok
}

// forwardOrQueue forwards single call p (upstream id uid) when a slot is
// free, and queues it for one otherwise; either way it is in the pending
// table.
func (c *Core) forwardOrQueue(e *Effects, uid uint64, p router.Pending, now time.Time) {
	cl := c.clients[p.Client]
	if c.slotFree() || p.Client == router.Internal || cl == nil {
		c.forward(e, uid, p, now)
		return
	}
	c.reqs.Add(uid, p)
	c.fair.queuedIDs[uid] = struct{}{}
	c.fair.push(cl, queuedCall{uid: uid, client: cl.id, at: now}, 1)
}

// sendOrQueueBatch sends the first arrays of client batch u of client id
// when a slot is free, and queues the batch as one unit costing its
// element count otherwise.
func (c *Core) sendOrQueueBatch(e *Effects, id router.ClientID, u *router.UpstreamBatch, now time.Time) {
	cl := c.clients[id]
	if c.slotFree() || cl == nil {
		c.sendArrays(e, u)
		return
	}
	c.fair.push(cl, queuedCall{up: u, client: id, at: now}, u.Len())
}

// dispatch sends queued calls, in fair order, while slots are free on the
// current connection.
func (c *Core) dispatch(e *Effects, now time.Time) {
	for c.gen != 0 && !c.shut && c.fair.queued() > 0 && c.slotsUsed() < c.fair.bound {
		qc, _ := c.fair.pop()
		if qc.up == nil {
			delete(c.fair.queuedIDs, qc.uid)
		}
		if c.clients[qc.client] == nil {
			continue // its client left: never sent
		}
		if qc.up != nil {
			c.obs.FairQueued(now.Sub(qc.at))
			c.sendArrays(e, qc.up)
			continue
		}
		p, ok := c.reqs.Peek(qc.uid)
		if !ok {
			continue // timed out while queued
		}
		c.obs.FairQueued(now.Sub(qc.at))
		c.launch(e, qc.uid, p, now, now)
	}
	c.paceHistory(e, now) // history goes behind every queued call (histpace.go)
}

// dropQueued drops the queue of cl, which left: its calls are never sent.
// A named client's calls share their name's queue with its other sessions:
// they are skipped when their turn comes.
func (c *Core) dropQueued(cl *client) {
	if c.fair.bound <= 0 || cl.named != nil {
		return
	}
	c.fair.q.Drop(uint64(cl.id), func(qc queuedCall) {
		if qc.up == nil {
			delete(c.fair.queuedIDs, qc.uid)
		}
	})
}

// resetSlots forgets the slots and the queues: the connection is gone or
// replaced, and the pending table's owner (lose, Shutdown) has dealt with
// every queued call.
func (c *Core) resetSlots() {
	if c.fair.bound <= 0 {
		return
	}
	clear(c.fair.atNode)
	clear(c.fair.queuedIDs)
	c.fair.q.Clear(nil)
	c.fair.bulk.Clear(nil)
}

// countThrottle counts m, a node's answer on connection gen, when it says
// the node limits the request rate (router.Throttle). Only errors are read.
func (c *Core) countThrottle(gen uint64, frame []byte, m *router.Message) {
	if !m.Error.Present() {
		return
	}
	if throttled, _ := router.Throttle(m.Error.In(frame)); throttled {
		c.obs.Throttled(gen)
	}
}
