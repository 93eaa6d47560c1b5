package core

import (
	"container/heap"
	"time"

	"github.com/muxd/muxd/router"
)

// maxOrphans bounds the orphan table: past it, a departed client's calls
// are not recorded, and their answers are counted as unknown ids. A client
// that connects, sends and leaves in a loop must not make muxd hold an
// entry per call it left behind.
const maxOrphans = 1 << 16

// orphanTable remembers the calls a client left behind: sent to the
// current upstream connection, still running at the node (JSON-RPC has no
// way to cancel a call), and owed to nobody. Their answers are dropped as
// DropClientGone, not mistaken for a node's stray answers (DropUnknownID),
// and their number is a gauge: calls that load the node for no one. An
// entry goes when its answer comes, at the departed request's deadline (an
// answer after it is late like any other), and when the connection is
// lost or switched away from (a draining connection's answers are not
// counted at all). An array the node refuses whole answers under its first
// id only: the rest of its orphans stay until their deadline.
//
// Expiry takes the entries due in deadline order (byDeadline), so that a
// sweep of a full table under the server's lock costs what expires, not a
// walk of every entry.
type orphanTable struct {
	calls      map[uint64]orphan // by upstream id
	byDeadline orphanHeap        // every entry of calls, and entries answered since, soonest first
}

// orphanDue is an entry of the expiry heap: upstream id uid, recorded with
// deadline (an entry whose call was answered meanwhile, or recorded again
// with another deadline, is skipped when it comes due).
type orphanDue struct {
	deadline time.Time
	uid      uint64
}

// orphanHeap is a min-heap of orphanDue by deadline (container/heap).
type orphanHeap []orphanDue

func (h orphanHeap) Len() int           { return len(h) }
func (h orphanHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h orphanHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *orphanHeap) Push(x any)        { *h = append(*h, x.(orphanDue)) }
func (h *orphanHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// orphan is a call a departed client left running.
type orphan struct {
	deadline    time.Time // the departed request's
	method, key string    // for the cache: its answer may still serve others
}

// orphaned records the calls of pending request p, upstream id uid, that a
// departed client leaves running at the node. ClientGone calls it for
// each request it drops, before the coalescing table forgets p (a
// coalesced call ends only with its last waiter).
func (c *Core) orphaned(uid uint64, p *router.Pending) {
	if p.Kind != router.KindCall || c.gen == 0 || c.drain.holds(uid, p) {
		// Subscriptions are released on their own; nothing is sent while
		// no connection is up; a draining connection's answers are
		// expected to find nothing.
		return
	}
	if k := c.coal.waiter[uid]; k != nil {
		// The call runs on for its other waiters, if any; with this
		// one gone it is nobody's.
		if k.live == 1 {
			c.orphans.add(k.uid, orphan{p.Deadline, k.method, k.key})
		}
		return
	}
	if p.Up != nil && !p.Up.Sent(uid) {
		return // a later array of its batch, or a queued batch: never sent
	}
	if c.queuedUnsent(uid) {
		return // queued for a slot, never sent
	}
	c.orphans.add(uid, orphan{p.Deadline, p.Method, p.Key})
}

func (t *orphanTable) add(uid uint64, o orphan) {
	if t.calls == nil {
		t.calls = map[uint64]orphan{}
	}
	if len(t.calls) >= maxOrphans {
		return
	}
	t.calls[uid] = o
	if len(t.byDeadline) >= 2*maxOrphans {
		// Mostly answered entries, not yet due: rebuild from the table.
		t.byDeadline = t.byDeadline[:0]
		for u, c := range t.calls {
			t.byDeadline = append(t.byDeadline, orphanDue{c.deadline, u})
		}
		heap.Init(&t.byDeadline)
		return
	}
	heap.Push(&t.byDeadline, orphanDue{o.deadline, uid})
}

// answered returns the orphan uid was the call of, and forgets it.
func (t *orphanTable) answered(uid uint64) (orphan, bool) {
	o, ok := t.calls[uid]
	if ok {
		delete(t.calls, uid)
	}
	return o, ok
}

// expire forgets the orphans whose deadline is not after now.
func (t *orphanTable) expire(now time.Time) {
	for len(t.byDeadline) > 0 && !t.byDeadline[0].deadline.After(now) {
		d := heap.Pop(&t.byDeadline).(orphanDue)
		if o, ok := t.calls[d.uid]; ok && o.deadline.Equal(d.deadline) {
			delete(t.calls, d.uid)
		}
	}
}

// forget empties the table: the connection its calls ran on is gone.
func (t *orphanTable) forget() {
	clear(t.calls)
	t.byDeadline = t.byDeadline[:0]
}

func (t *orphanTable) len() int { return len(t.calls) }
