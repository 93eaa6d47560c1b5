package core

import (
	"time"

	"github.com/muxd/muxd/router"
)

// waitQueue holds the requests accepted while no upstream is connected, and
// those carried over from a lost connection for a retry, in arrival order.
// A client that leaves does not walk the queue: its entries stay until the
// queue is next walked or compacted, and are skipped as dead then, so that
// leaving costs O(1) amortized.
type waitQueue struct {
	items []waitingRequest
	live  int // entries whose client is still here (muxd's own count as live)
}

// waitingRequest is one request waiting for an upstream. id is its upstream
// id, kept so that a retry goes out under the id it had.
type waitingRequest struct {
	id uint64
	p  router.Pending
	// giveUp is when it stops waiting for an upstream and gets -32002
	// (UpstreamWait after it began to wait).
	giveUp time.Time
}

// full reports whether the queue is at its bound.
func (q *waitQueue) full(max int) bool { return q.live >= max }

// add appends a request.
func (q *waitQueue) add(w waitingRequest) {
	q.items = append(q.items, w)
	q.live++
}

// forget accounts for n entries of a client that left, and compacts the
// queue when dead entries make up most of it.
func (q *waitQueue) forget(n int, alive func(router.ClientID) bool) {
	q.live -= n
	if dead := len(q.items) - q.live; dead > 64 && dead > q.live {
		q.filter(alive, func(*waitingRequest) bool { return true })
	}
}

// filter drops the entries of clients that left, and keeps, in order, the
// others that keep reports true for.
func (q *waitQueue) filter(alive func(router.ClientID) bool, keep func(*waitingRequest) bool) {
	kept := q.items[:0]
	for i := range q.items {
		if w := &q.items[i]; alive(w.p.Client) && keep(w) {
			kept = append(kept, *w)
		}
	}
	clear(q.items[len(kept):])
	q.items = kept
	q.live = len(kept)
}

// take empties the queue and returns what it held, dead entries included.
func (q *waitQueue) take() []waitingRequest {
	items := q.items
	q.items, q.live = nil, 0
	return items
}

// A request waiting for an upstream gives up on a dial's verdict, not on
// the clock alone (DESIGN §3): once its UpstreamWait has passed it gets
// -32002 when a dial fails (every upstream not connected found away since
// the wait ended, DialsFailed), not while a dial is at a node (Dialing),
// which may yet bring one, for up to ReachedHold after its wait ended;
// with neither, DialGrace after its wait ended (a dial that hangs on an
// address that does not answer). The shell dials often while requests
// wait, so the verdict comes soon after the wait. The hold is bounded
// because "at a node" is only a TCP connection: a hung node's kernel, or
// a proxy whose backend is gone, accepts it and never finishes the
// handshake, and dials follow each other there without end.

// Dialing is the event of a dial attempt reaching a node, its connection
// open and its WebSocket handshake under way (reached true), or of no
// attempt being at one any more (false, whatever the outcome). While one
// is, no waiting request gives up for want of an upstream.
func (c *Core) Dialing(reached bool) { c.dialReached = reached }

// DialsFailed is the event of every upstream not connected having failed a
// dial at or after at (the node refused the connection, or the handshake
// failed): the nodes are away. A waiting request whose UpstreamWait ended
// by then gets -32002 "no upstream connected" now, unless a dial is at a
// node (Dialing); one whose deadline has passed, "request timed out".
func (c *Core) DialsFailed(e *Effects, at, now time.Time) {
	e.Reset()
	defer c.finish(e)
	if at.After(c.awayAt) {
		c.awayAt = at
	}
	expired, gaveUp := c.expireWaiting(now, nil, nil)
	c.answerAll(e, expired, router.ErrorTimeout, now)
	c.answerAll(e, gaveUp, errNoUpstream, now)
}

// ReachedHold is how long past its UpstreamWait a waiting request is held
// while a dial is at a node: a node back from a restart finishes its
// handshake in milliseconds.
const ReachedHold = 3 * time.Second

// Waiting returns how many requests wait for an upstream.
func (c *Core) Waiting() int { return c.waiting.live }

// stillWaits reports whether w, its deadline not passed, goes on waiting
// for an upstream at now: its UpstreamWait has not passed, or it has but
// no dial has said the nodes are away since (see Dialing, DialsFailed)
// and DialGrace has not passed either, or a dial is at a node and
// ReachedHold has not passed.
func (c *Core) stillWaits(w *waitingRequest, now time.Time) bool {
	switch {
	case w.giveUp.IsZero() || w.giveUp.After(now):
		return true
	case c.dialReached && now.Before(w.giveUp.Add(ReachedHold)):
		return true
	default:
		return c.awayAt.Before(w.giveUp) && now.Before(w.giveUp.Add(c.cfg.DialGrace))
	}
}

// expireWaiting removes from the waiting queue the requests whose deadline
// is not after now, appended to expired, and those that stop waiting for
// an upstream (stillWaits), appended to gaveUp, and returns both; the
// caller answers them. Only calls are returned: muxd's own requests of
// other kinds are settled and forgotten.
func (c *Core) expireWaiting(now time.Time, expired, gaveUp []router.Pending) ([]router.Pending, []router.Pending) {
	c.waiting.filter(c.alive, func(w *waitingRequest) bool {
		timedOut := !w.p.Deadline.IsZero() && !w.p.Deadline.After(now)
		if !timedOut && c.stillWaits(w, now) {
			return true
		}
		if cl := c.clients[w.p.Client]; cl != nil {
			cl.waiting--
		}
		c.settled(&w.p)
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
		return false
	})
	return expired, gaveUp
}
