package core

import (
	"time"

	"github.com/muxd/muxd/gapfill"
	"github.com/muxd/muxd/router"
)

// This file paces the requests that fetch history subscriptions' history
// (history.go): bulk traffic (DESIGN §5), which must never delay a
// client's call. The gap machine decides what each history key fetches
// (its jobs, ranges and order are those of any key); the core holds its
// sends back in one FIFO (histPace.queue) and sends the next only when
//
//   - fewer than historyInFlight history requests are at the node, over
//     every history key: a few ranges in flight keep a history moving
//     without crowding the node;
//   - no client call waits in a fair-share queue (either class): a history
//     request goes behind every queued client call, bulk-class names
//     included, so history waits while clients flood past the bound;
//   - a slot is free under max_upstream_in_flight: a history request
//     in flight takes a slot as a client call does (fairshare.go: freed
//     by its answer, its deadline, slotHold or the connection's loss), so
//     history and client calls together stay within the bound.
//
// With the bound off (0) only historyInFlight applies. The machine starts a
// request's deadline again when it actually goes (gapfill Sending), so a
// wait behind clients does not count as the node's time; the job's
// deadline still bounds a history held back that long (it then ends with
// a "timeout" gap, as a backfill that takes too long does). A queued send
// whose key is gone (its subscriber left or unsubscribed: endHistory
// forgets the key), or which the machine dropped meanwhile (the
// connection was lost, its job restarted), is never sent.
//
// Only history subscriptions' fetches are paced: the backfill after a
// cut, which keeps plain subscriptions gap-free, stays prompt; the checks
// before a history eth_subscribe is answered (history.go) are that
// client's call waiting; subscriptions, unsubscribes, health checks and
// the finalized block are muxd's own few requests, as before.

// historyInFlight bounds the history requests at the node at a time,
// across every history subscription. Each one is an eth_getLogs over up
// to HistoryChunk blocks (or a header), so a handful keep a history
// moving; more would only crowd the node clients share.
const historyInFlight = 4

// histPace is the core's part of this file.
type histPace struct {
	queue []gapfill.Send // held back, oldest first; queue[head:] waits
	head  int
	// inFlight holds the upstream ids of the history requests sent on
	// the current connection and not answered, timed out or lost.
	inFlight map[uint64]struct{}
}

// sendGap sends the machine's request r, as muxd's own; a history key's
// waits its turn (paceHistory).
func (c *Core) sendGap(e *Effects, r gapfill.Send, now time.Time) {
	if c.hist[r.Key] != nil {
		c.pace.queue = append(c.pace.queue, r)
		return
	}
	uid := c.internalRequest(e, router.KindBackfill, r.Method, r.Params, r.Key, now.Add(c.gapTimeout), now)
	c.gapReqs[uid] = r.ID
}

// paceHistory sends the held history requests that may go now, oldest
// first.
func (c *Core) paceHistory(e *Effects, now time.Time) {
	for c.pace.head < len(c.pace.queue) && c.gen != 0 && !c.shut &&
		len(c.pace.inFlight) < historyInFlight && c.fair.queued() == 0 &&
		(c.fair.bound <= 0 || c.slotsUsed() < c.fair.bound) {
		r := c.pace.queue[c.pace.head]
		c.pace.queue[c.pace.head] = gapfill.Send{}
		c.pace.head++
		if c.hist[r.Key] == nil || !c.gap.Sending(r.ID, now) {
			continue // its subscriber left, or the machine dropped it
		}
		uid := c.internalRequest(e, router.KindBackfill, r.Method, r.Params, r.Key, now.Add(c.gapTimeout), now)
		c.gapReqs[uid] = r.ID
		if c.pace.inFlight == nil {
			c.pace.inFlight = map[uint64]struct{}{}
		}
		c.pace.inFlight[uid] = struct{}{}
		c.tookSlot(uid, time.Time{}, now)
		c.obs.HistoryRequests(1)
	}
	if c.pace.head == len(c.pace.queue) {
		clear(c.pace.queue)
		c.pace.queue, c.pace.head = c.pace.queue[:0], 0
	}
}

// historySettled records that history request uid is no longer at the
// node (answered or timed out).
func (c *Core) historySettled(uid uint64) { delete(c.pace.inFlight, uid) }

// historyPaceLost forgets the history requests in flight and held: the
// connection is gone, and the machine with it dropped every request
// (Disconnected); the next connection's jobs ask again.
func (c *Core) historyPaceLost() {
	clear(c.pace.inFlight)
	clear(c.pace.queue)
	c.pace.queue, c.pace.head = c.pace.queue[:0], 0
}
