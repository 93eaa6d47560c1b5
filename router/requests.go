package router

import (
	"cmp"
	"slices"
	"time"
)

// ClientID names a client session. Zero is muxd itself: requests muxd sends
// on its own behalf (subscribing, unsubscribing) carry it.
type ClientID uint64

// Internal is the ClientID of requests muxd makes itself.
const Internal ClientID = 0

// Kind says what muxd does with the answer to a pending request.
type Kind uint8

const (
	KindCall        Kind = iota // an ordinary call: the answer goes to the client
	KindSubscribe               // eth_subscribe for a subscription key (muxd's own)
	KindUnsubscribe             // eth_unsubscribe muxd sends when a key's last client leaves
	KindBackfill                // a request of muxd's own to fill a subscription's gap (package gapfill)
	KindFinalized               // muxd's own eth_getBlockByNumber("finalized"), for the cache (package core)
)

// Pending is one request in flight upstream.
type Pending struct {
	Client   ClientID
	ID       []byte // the client's id, exactly as it wrote it
	Method   string
	Sent     time.Time // when the client's request reached muxd
	Deadline time.Time
	Batch    *Batch // the client batch it belongs to, nil for a single request
	// Up is what the node sees of that batch: the array the request goes
	// upstream in. nil for a single request and for muxd's own.
	Up    *UpstreamBatch
	Frame []byte // the request as sent upstream, kept so it can be sent again
	Kind  Kind
	// Key is the subscription key, for KindSubscribe, KindUnsubscribe and
	// KindBackfill; for a KindCall, its CallKey when package core may
	// coalesce or cache it, else "".
	Key string
}

// Requests is the pending table of ONE upstream connection: upstream id ->
// the request it stands for. Upstream ids come from a counter that never
// repeats for the life of the table, across Discard.
//
// Requests is not safe for concurrent use.
type Requests struct {
	next uint64
	// m maps an upstream id to its Pending in slots. Pending is too large
	// for a map to hold inline (over 128 bytes), so a map[uint64]Pending
	// would allocate on every insert; slots are reused through free.
	m     map[uint64]int
	slots []slot
	free  []int
	// perCli heads each client's list of slots, so that a departing
	// client's requests are found without a walk over the whole table.
	perCli   map[ClientID]clientSlots
	deadline deadlineHeap
}

// slot holds one pending request and links it into its client's list.
type slot struct {
	p          Pending
	id         uint64 // its upstream id
	prev, next int    // neighbouring slots of the same client; -1 ends the list
}

// clientSlots is one client's list of slots: how many, and the first.
type clientSlots struct{ n, head int }

// NewRequests returns an empty table whose first upstream id is 1.
func NewRequests() *Requests {
	return &Requests{m: make(map[uint64]int), perCli: make(map[ClientID]clientSlots)}
}

// Next returns a fresh upstream id.
func (r *Requests) Next() uint64 {
	r.next++
	return r.next
}

// Add records p under upstream id id (from Next, or an id being retried).
func (r *Requests) Add(id uint64, p Pending) {
	i, ok := r.m[id]
	if ok {
		r.unlink(i)
	} else {
		if n := len(r.free); n > 0 {
			i = r.free[n-1]
			r.free = r.free[:n-1]
		} else {
			i = len(r.slots)
			r.slots = append(r.slots, slot{})
		}
		r.m[id] = i
	}
	r.slots[i].p, r.slots[i].id = p, id
	r.link(i)
	if !p.Deadline.IsZero() {
		r.deadline.push(deadlineItem{p.Deadline, id})
	}
	r.compact()
}

// Take looks up the request answered by upstream id id and removes it, so
// that a second answer with the same id finds nothing.
func (r *Requests) Take(id uint64) (Pending, bool) {
	i, ok := r.m[id]
	if !ok {
		return Pending{}, false
	}
	p := r.slots[i].p
	r.remove(id, i)
	return p, true
}

// Peek returns the request pending under upstream id id, leaving it there.
// The pointer is valid until the table next changes.
func (r *Requests) Peek(id uint64) (*Pending, bool) {
	i, ok := r.m[id]
	if !ok {
		return nil, false
	}
	return &r.slots[i].p, true
}

// remove deletes id, whose Pending is in slots[i].
func (r *Requests) remove(id uint64, i int) {
	r.unlink(i)
	r.slots[i] = slot{} // let the frame and id bytes go
	r.free = append(r.free, i)
	delete(r.m, id)
}

// link puts slots[i] at the head of its client's list.
func (r *Requests) link(i int) {
	c := r.slots[i].p.Client
	l, ok := r.perCli[c]
	if !ok {
		l.head = -1
	}
	r.slots[i].prev, r.slots[i].next = -1, l.head
	if l.head >= 0 {
		r.slots[l.head].prev = i
	}
	r.perCli[c] = clientSlots{n: l.n + 1, head: i}
}

// unlink takes slots[i] out of its client's list.
func (r *Requests) unlink(i int) {
	s := &r.slots[i]
	c := s.p.Client
	l := r.perCli[c]
	if s.prev >= 0 {
		r.slots[s.prev].next = s.next
	} else {
		l.head = s.next
	}
	if s.next >= 0 {
		r.slots[s.next].prev = s.prev
	}
	s.prev, s.next = -1, -1
	if l.n--; l.n > 0 {
		r.perCli[c] = l
	} else {
		delete(r.perCli, c)
	}
}

// Len is the number of requests in flight.
func (r *Requests) Len() int { return len(r.m) }

// Expire removes every request whose deadline is not after now and calls fn
// for each, earliest deadline first.
func (r *Requests) Expire(now time.Time, fn func(id uint64, p Pending)) {
	for r.deadline.len() > 0 {
		top := r.deadline.peek()
		if top.at.After(now) {
			return
		}
		r.deadline.pop()
		i, ok := r.m[top.id]
		if !ok || !r.slots[i].p.Deadline.Equal(top.at) {
			continue // answered already, or re-added with another deadline
		}
		p := r.slots[i].p
		r.remove(top.id, i)
		fn(top.id, p)
	}
}

// DropClient removes every request of client c, for a client that has gone.
// Answers that still come for them then match nothing and are dropped. It
// costs in proportion to c's requests, not to the table. fn, if not nil, is
// called for each request removed and must not change r.
func (r *Requests) DropClient(c ClientID, fn func(id uint64, p Pending)) {
	l, ok := r.perCli[c]
	if !ok {
		return
	}
	for i := l.head; i >= 0; {
		next := r.slots[i].next
		p, id := r.slots[i].p, r.slots[i].id
		r.remove(id, i)
		if fn != nil {
			fn(id, p)
		}
		i = next
	}
}

// Discard empties the table, as when its upstream connection is lost, and
// calls fn for every request that was in it, in upstream id order. The id
// counter is kept, so ids are never reused by the table.
func (r *Requests) Discard(fn func(id uint64, p Pending)) {
	old, slots := r.m, r.slots
	r.m = make(map[uint64]int)
	r.slots, r.free = nil, nil
	r.perCli = make(map[ClientID]clientSlots)
	r.deadline = deadlineHeap{}
	if fn == nil {
		return
	}
	ids := make([]uint64, 0, len(old))
	for id := range old {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fn(id, slots[old[id]].p)
	}
}

// compact rebuilds the deadline heap when answered requests make up most of
// it, so its size stays proportional to what is really in flight.
func (r *Requests) compact() {
	if r.deadline.len() < 1024 || r.deadline.len() < 4*len(r.m) {
		return
	}
	live := r.deadline.items[:0]
	for _, it := range r.deadline.items {
		if i, ok := r.m[it.id]; ok && r.slots[i].p.Deadline.Equal(it.at) {
			live = append(live, it)
		}
	}
	// An id taken and added again with the same deadline leaves several
	// items that all match it; keep one, or the heap grows without bound.
	slices.SortFunc(live, func(a, b deadlineItem) int { return cmp.Compare(a.id, b.id) })
	live = slices.CompactFunc(live, func(a, b deadlineItem) bool { return a.id == b.id })
	clear(r.deadline.items[len(live):])
	r.deadline.items = live
	r.deadline.init()
}

type deadlineItem struct {
	at time.Time
	id uint64
}

// deadlineHeap is a binary min-heap by deadline; typed, so that pushing does
// not box items the way container/heap would.
type deadlineHeap struct{ items []deadlineItem }

func (h *deadlineHeap) len() int           { return len(h.items) }
func (h *deadlineHeap) peek() deadlineItem { return h.items[0] }
func (h *deadlineHeap) less(i, j int) bool { return h.items[i].at.Before(h.items[j].at) }
func (h *deadlineHeap) swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }

func (h *deadlineHeap) push(it deadlineItem) {
	h.items = append(h.items, it)
	h.up(len(h.items) - 1)
}

func (h *deadlineHeap) pop() deadlineItem {
	n := len(h.items) - 1
	h.swap(0, n)
	it := h.items[n]
	h.items = h.items[:n]
	if n > 0 {
		h.down(0)
	}
	return it
}

func (h *deadlineHeap) init() {
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *deadlineHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			return
		}
		h.swap(i, j)
		j = i
	}
}

func (h *deadlineHeap) down(i int) {
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			return
		}
		h.swap(i, j)
		i = j
	}
}
