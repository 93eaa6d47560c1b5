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
