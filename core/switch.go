package core

import (
	"maps"
	"slices"
	"time"

	"github.com/muxd/muxd/router"
)

// This file is the switch from one upstream connection to another while
// the first still works (package failover chooses when: a lagging or
// stalled node, a failback to the preferred one). It is the loss of the
// old connection, as UpstreamLost, with one difference: a request that may
// not be sent twice (a client call whose method is not on the retry list,
// eth_sendRawTransaction above all, alone or with the rest of its batch's
// array) stays with the old connection, which still answers it.
// Everything else moves: retryable requests go again on the new
// connection, subscriptions are made there with their client ids
// unchanged and their gaps filled (package gapfill), so that a switch is
// as lossless as a reconnect and loses no answer a loss would not.
//
// The old connection drains: its pushes are ignored (the subscriptions now
// live on the new one), answers to the requests left to it are delivered,
// and answers to what moved are ignored without being counted as drops. Once it owes nothing the core asks
// the shell to close it (Effects.Close). At most one connection drains: a
// second switch fails what the first left, as its loss would.

// drainState is the connection the core moved away from, and the upstream
// ids of the requests left to it that may still be in the pending table.
type drainState struct {
	gen uint64
	ids map[uint64]struct{}
}

// holds reports whether upstream id id was left to the draining
// connection. It has the signature of lose's keep.
func (d *drainState) holds(id uint64, _ *router.Pending) bool {
	_, ok := d.ids[id]
	return ok
}

// answers reports whether an answer under upstream id id on connection gen
// is one the draining connection still owes.
func (d *drainState) answers(gen, id uint64) bool {
	return gen != 0 && gen == d.gen && d.holds(id, nil)
}

// UpstreamSwitch is the event of connection gen (never 0, larger than any
// before) replacing the current one while the current one still works.
// Requests in flight on the current connection that may be sent again, and
// every subscription, move to gen, as on its loss; a single client call
// that may not be sent again stays and is answered by the old connection,
// which drains (see this file's comment). Without a current connection it
// is UpstreamConnected.
func (c *Core) UpstreamSwitch(e *Effects, gen uint64, now time.Time) {
	e.Reset()
	defer c.finish(e)
	old := c.gen
	if old == 0 {
		c.connected(e, gen, now)
		return
	}
	if c.drain.gen != 0 {
		// The connection drained before this one is given up.
		e.Close = append(e.Close, c.drain.gen)
		c.failDrain(e, now)
	}
	kept := c.lose(e, now, "upstream switched away from", c.stays)
	c.drain.gen = old
	c.drain.ids = make(map[uint64]struct{}, len(kept))
	for _, id := range kept {
		c.drain.ids[id] = struct{}{}
	}
	c.drained(e)
	c.connected(e, gen, now)
	e.info("upstream switched", "from_gen", old, "gen", gen, "left_to_drain", len(kept))
}

// stays reports whether pending request p stays with the connection muxd
// switches away from: a client's single call (not waiting on a coalesced
// call) that may not be sent twice, and every call of a client batch's
// upstream array that holds such a call still owed, once the whole batch
// has been sent (the node answers the array as one; a batch with arrays
// still to send moves as on a loss). Those of a connection already
// draining stay too.
func (c *Core) stays(id uint64, p *router.Pending) bool {
	if c.drain.holds(id, p) {
		return true
	}
	if p.Kind != router.KindCall || p.Client == router.Internal || c.queuedUnsent(id) {
		return false // a call queued for a slot was never sent: it moves
	}
	if p.Up != nil {
		return p.Up.SentOwing(c.mayNotRepeat)
	}
	return c.mayNotRepeat(p) && c.coal.waiter[id] == nil
}

// mayNotRepeat reports whether p's method is one that is not sent twice
// (not on retry_methods).
func (c *Core) mayNotRepeat(p *router.Pending) bool { return !c.policy.retryable(p.Method) }

// drained closes the draining connection once the requests left to it
// have all left the pending table (answered, timed out, or their client
// gone).
func (c *Core) drained(e *Effects) {
	if c.drain.gen == 0 {
		return
	}
	for id := range c.drain.ids {
		if _, ok := c.reqs.Peek(id); !ok {
			delete(c.drain.ids, id)
		}
	}
	if len(c.drain.ids) == 0 {
		e.Close = append(e.Close, c.drain.gen)
		c.drain = drainState{}
	}
}

// failDrain answers every request left to the draining connection with
// -32002 "connection lost", as if it had been lost with them in flight,
// and forgets that connection.
func (c *Core) failDrain(e *Effects, now time.Time) {
	lost := router.ErrorUnavailable.Because("connection lost")
	failed := 0
	// In id order: the calls of a batch's array are answered in the
	// client's order, as everywhere else.
	for _, id := range slices.Sorted(maps.Keys(c.drain.ids)) {
		p, ok := c.reqs.Take(id)
		if !ok {
			continue
		}
		failed++
		if cl := c.settled(&p); cl != nil {
			c.answerOwn(e, cl, &p, lost, now)
		}
	}
	e.note("drained upstream lost", "gen", c.drain.gen, "failed", failed)
	c.drain = drainState{}
}
