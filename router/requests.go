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
	// Slot is its answer's place in Batch's array (Batch.Add): its
	// position among the batch's answered elements, in request order.
	Slot int
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
// The calls of one client batch's upstream array share one record (a
// group): one entry in their client's list and one deadline in the heap,
// their Pendings kept in the UpstreamBatch beside its elements. Only the
// id index is per request, and it is a slice, not a map: see idIndex.
//
// Requests is not safe for concurrent use.
type Requests struct {
	next uint64
	n    int     // requests pending
	ids  idIndex // upstream id -> slot
	// slots hold single requests and groups, reused through free.
	slots []slot
	free  []int
	// perCli heads each client's list of slots, so that a departing
	// client's requests are found without a walk over the whole table.
	perCli   map[ClientID]clientSlots
	deadline deadlineHeap
}

// slot holds one pending request, or one group, and links it into its
// client's list.
type slot struct {
	p  Pending // the request; for a group, what its calls share (see Group)
	id uint64  // its upstream id (0 for a group)
	// up, for a group, is the upstream array whose calls it holds: each
	// pending call's Pending is in up.elems. live counts them.
	up   *UpstreamBatch
	live int
	// at is the deadline of the slot's newest heap item: for a group, the
	// earliest of its calls' deadlines when that item was pushed. gen
	// changes whenever the slot is freed, so that a heap item of an
	// earlier use is known stale.
	at         time.Time
	gen        uint32
	used       bool
	prev, next int // neighbouring slots of the same client; -1 ends the list
}

// clientSlots is one client's list of slots: how many, and the first.
type clientSlots struct{ n, head int }

// NewRequests returns an empty table whose first upstream id is 1.
func NewRequests() *Requests {
	return &Requests{perCli: make(map[ClientID]clientSlots)}
}

// Next returns a fresh upstream id.
func (r *Requests) Next() uint64 {
	r.next++
	return r.next
}

// Add records p under upstream id id (from Next, or an id being retried),
// replacing what was recorded under id. A call of an upstream array
// (p.Up set, holding a call with id id) joins the group of that array's
// calls.
func (r *Requests) Add(id uint64, p Pending) {
	if s, ok := r.ids.get(id); ok {
		r.drop(id, s)
	}
	if p.Up != nil {
		if k := p.Up.index(id); k >= 0 && r.addCall(id, k, p) {
			return
		}
	}
	s := r.alloc(p.Client)
	sl := &r.slots[s]
	sl.p, sl.id = p, id
	r.ids.set(id, s)
	r.n++
	if !p.Deadline.IsZero() {
		sl.at = p.Deadline
		r.deadline.push(deadlineItem{p.Deadline, int32(s), sl.gen})
	}
	r.compact()
}

// addCall records call id, elems[k] of p.Up, in the array's group, made
// on its first call. Every call of a group has the group's Client, Kind
// and Batch; it reports false, having done nothing, for a call that does
// not.
func (r *Requests) addCall(id uint64, k int, p Pending) bool {
	u := p.Up
	s := r.groupOf(u)
	if s < 0 {
		s = r.alloc(p.Client)
		g := &r.slots[s]
		g.up = u
		g.p.Kind, g.p.Batch, g.p.Up = p.Kind, p.Batch, u
		u.slot = int32(s) + 1
		for i := range u.elems {
			u.elems[i].pending = false
		}
	} else if g := &r.slots[s].p; g.Client != p.Client || g.Kind != p.Kind || g.Batch != p.Batch {
		return false
	}
	sl := &r.slots[s]
	e := &u.elems[k]
	e.p, e.pending = p, true
	sl.live++
	r.ids.set(id, s)
	r.n++
	if !p.Deadline.IsZero() && (sl.at.IsZero() || p.Deadline.Before(sl.at)) {
		sl.at = p.Deadline
		r.deadline.push(deadlineItem{p.Deadline, int32(s), sl.gen})
	}
	r.compact()
	return true
}

// groupOf returns the slot of u's group in this table, or -1.
func (r *Requests) groupOf(u *UpstreamBatch) int {
	s := int(u.slot) - 1
	if s < 0 || s >= len(r.slots) || r.slots[s].up != u || !r.slots[s].used {
		return -1
	}
	return s
}

// alloc takes a free slot for client c and links it into c's list.
func (r *Requests) alloc(c ClientID) int {
	var s int
	if n := len(r.free); n > 0 {
		s = r.free[n-1]
		r.free = r.free[:n-1]
	} else {
		s = len(r.slots)
		r.slots = append(r.slots, slot{})
	}
	sl := &r.slots[s]
	sl.used = true
	sl.p.Client = c
	r.link(s)
	return s
}

// release frees slot s: its client's list no longer holds it and any heap
// item for it is stale.
func (r *Requests) release(s int) {
	r.unlink(s)
	sl := &r.slots[s]
	if sl.up != nil {
		sl.up.slot = 0
	}
	*sl = slot{gen: sl.gen + 1} // let the frame and id bytes go
	r.free = append(r.free, s)
}

// entry returns the Pending of id, which the index maps to slot s, and, for
// a call of a group, its element.
func (r *Requests) entry(id uint64, s int) (*Pending, *upElem) {
	sl := &r.slots[s]
	if sl.up == nil {
		return &sl.p, nil
	}
	e := &sl.up.elems[sl.up.index(id)]
	return &e.p, e
}

// drop removes id, which the index maps to slot s.
func (r *Requests) drop(id uint64, s int) {
	r.ids.del(id)
	r.n--
	sl := &r.slots[s]
	if sl.up != nil {
		sl.up.elems[sl.up.index(id)].pending = false
		if sl.live--; sl.live > 0 {
			return
		}
	}
	r.release(s)
}

// Take looks up the request answered by upstream id id and removes it, so
// that a second answer with the same id finds nothing.
func (r *Requests) Take(id uint64) (Pending, bool) {
	s, ok := r.ids.get(id)
	if !ok {
		return Pending{}, false
	}
	p, _ := r.entry(id, s)
	out := *p
	r.drop(id, s)
	return out, true
}

// Peek returns the request pending under upstream id id, leaving it there.
// The pointer is valid until the table next changes.
func (r *Requests) Peek(id uint64) (*Pending, bool) {
	s, ok := r.ids.get(id)
	if !ok {
		return nil, false
	}
	p, _ := r.entry(id, s)
	return p, true
}

// Group returns what the calls of the group holding the call pending under
// id share (Client, Kind, Batch and Up; the rest is zero), and how many of
// them are pending; nil, 0 when id is not pending as a call of a group.
// Calls of the same group get the same pointer, valid until the table
// next changes.
func (r *Requests) Group(id uint64) (*Pending, int) {
	s, ok := r.ids.get(id)
	if !ok || r.slots[s].up == nil {
		return nil, 0
	}
	return &r.slots[s].p, r.slots[s].live
}

// TakeGroup removes every call pending in the group of the upstream array
// whose call id is, as when one answer settles them all, and returns how
// many; 0 when id is not pending as a call of a group.
func (r *Requests) TakeGroup(id uint64) int {
	s, ok := r.ids.get(id)
	if !ok || r.slots[s].up == nil {
		return 0
	}
	u, n := r.slots[s].up, r.slots[s].live
	for _, pos := range u.calls {
		if e := &u.elems[pos]; e.pending {
			e.pending = false
			r.ids.del(e.id)
		}
	}
	r.n -= n
	r.release(s)
	return n
}

// link puts slots[s] at the head of its client's list.
func (r *Requests) link(s int) {
	c := r.slots[s].p.Client
	l, ok := r.perCli[c]
	if !ok {
		l.head = -1
	}
	r.slots[s].prev, r.slots[s].next = -1, l.head
	if l.head >= 0 {
		r.slots[l.head].prev = s
	}
	r.perCli[c] = clientSlots{n: l.n + 1, head: s}
}

// unlink takes slots[s] out of its client's list.
func (r *Requests) unlink(s int) {
	sl := &r.slots[s]
	c := sl.p.Client
	l := r.perCli[c]
	if sl.prev >= 0 {
		r.slots[sl.prev].next = sl.next
	} else {
		l.head = sl.next
	}
	if sl.next >= 0 {
		r.slots[sl.next].prev = sl.prev
	}
	sl.prev, sl.next = -1, -1
	if l.n--; l.n > 0 {
		r.perCli[c] = l
	} else {
		delete(r.perCli, c)
	}
}

// Len is the number of requests in flight.
func (r *Requests) Len() int { return r.n }

// current reports whether heap item it still stands for its slot.
func (r *Requests) current(it deadlineItem) bool {
	if int(it.slot) >= len(r.slots) {
		return false
	}
	sl := &r.slots[it.slot]
	return sl.used && sl.gen == it.gen && sl.at.Equal(it.at)
}

// Expire removes every request whose deadline is not after now and calls fn
// for each, earliest deadline first (a group's calls whose deadlines have
// passed together in upstream id order). fn must not change r.
func (r *Requests) Expire(now time.Time, fn func(id uint64, p Pending)) {
	for r.deadline.len() > 0 {
		top := r.deadline.peek()
		if top.at.After(now) {
			return
		}
		r.deadline.pop()
		if !r.current(top) {
			continue // answered already, or its deadline changed
		}
		s := int(top.slot)
		sl := &r.slots[s]
		if sl.up == nil {
			p, id := sl.p, sl.id
			r.ids.del(id)
			r.n--
			r.release(s)
			fn(id, p)
			continue
		}
		u, gen := sl.up, sl.gen
		var next time.Time
		for _, pos := range u.calls {
			e := &u.elems[pos]
			switch {
			case !e.pending || e.p.Deadline.IsZero():
			case !e.p.Deadline.After(now):
				p := e.p
				r.drop(e.id, s)
				fn(e.id, p)
			case next.IsZero() || e.p.Deadline.Before(next):
				next = e.p.Deadline
			}
		}
		if sl := &r.slots[s]; sl.used && sl.gen == gen {
			// The calls left (if any) get an item for the earliest
			// of their deadlines.
			sl.at = next
			if !next.IsZero() {
				r.deadline.push(deadlineItem{next, int32(s), gen})
			}
		}
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
	for s := l.head; s >= 0; {
		sl := &r.slots[s]
		next := sl.next
		if sl.up == nil {
			p, id := sl.p, sl.id
			r.ids.del(id)
			r.n--
			r.release(s)
			if fn != nil {
				fn(id, p)
			}
		} else {
			u := sl.up
			for _, pos := range u.calls {
				if e := &u.elems[pos]; e.pending {
					p, id := e.p, e.id
					r.drop(id, s)
					if fn != nil {
						fn(id, p)
					}
				}
			}
		}
		s = next
	}
}

// Discard empties the table, as when its upstream connection is lost, and
// calls fn for every request that was in it, in upstream id order. The id
// counter is kept, so ids are never reused by the table.
func (r *Requests) Discard(fn func(id uint64, p Pending)) {
	slots, n := r.slots, r.n
	r.n = 0
	r.ids = idIndex{}
	r.slots, r.free = nil, nil
	r.perCli = make(map[ClientID]clientSlots)
	r.deadline = deadlineHeap{}
	type entry struct {
		id uint64
		p  *Pending
	}
	var all []entry
	if fn != nil {
		all = make([]entry, 0, n)
	}
	for s := range slots {
		sl := &slots[s]
		switch {
		case !sl.used:
		case sl.up == nil:
			if fn != nil {
				all = append(all, entry{sl.id, &sl.p})
			}
		default:
			sl.up.slot = 0
			for _, pos := range sl.up.calls {
				if e := &sl.up.elems[pos]; e.pending {
					e.pending = false
					if fn != nil {
						all = append(all, entry{e.id, &e.p})
					}
				}
			}
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Compare(a.id, b.id) })
	for _, x := range all {
		fn(x.id, *x.p)
	}
}

// compact rebuilds the deadline heap when stale items (of requests
// answered) make up most of it, so its size stays proportional to what is
// really in flight.
func (r *Requests) compact() {
	if r.deadline.len() < 1024 || r.deadline.len() < 4*r.n {
		return
	}
	live := r.deadline.items[:0]
	for _, it := range r.deadline.items {
		if r.current(it) {
			live = append(live, it)
		}
	}
	// A slot's current items all match it; keep one, or the heap grows
	// without bound.
	slices.SortFunc(live, func(a, b deadlineItem) int { return cmp.Compare(a.slot, b.slot) })
	live = slices.CompactFunc(live, func(a, b deadlineItem) bool { return a.slot == b.slot })
	clear(r.deadline.items[len(live):])
	r.deadline.items = live
	r.deadline.init()
}

// idIndex maps upstream ids to slots. Ids are handed out in increasing
// order and most are answered in about that order, so the ids in flight
// are nearly a dense range: those from base on lie in a window, a slice
// indexed by id-base, which costs no hashing and no allocation once grown.
// An id that falls behind the window (a request in flight while maxWindow
// later ids were handed out, or one retried under an old id) moves to a
// map.
type idIndex struct {
	base uint64
	buf  []int32 // buf[off:] is the window: 1 + the slot of id base+i, 0 for none
	off  int
	old  map[uint64]int32 // ids below base
}

// maxWindow bounds the window's span of ids (4 bytes each).
const maxWindow = 1 << 16

func (x *idIndex) get(id uint64) (int, bool) {
	if id >= x.base {
		if k := id - x.base; k < uint64(len(x.buf)-x.off) {
			v := x.buf[x.off+int(k)]
			return int(v) - 1, v != 0
		}
		return 0, false
	}
	v, ok := x.old[id]
	return int(v), ok
}

func (x *idIndex) set(id uint64, s int) {
	if x.off == len(x.buf) && id >= x.base {
		// The window is empty: it may start at id. (Not below its
		// base: the map may hold ids from there down.)
		x.buf, x.off, x.base = x.buf[:0], 0, id
	}
	if id < x.base {
		if x.old == nil {
			x.old = make(map[uint64]int32)
		}
		x.old[id] = int32(s)
		return
	}
	if id-x.base >= maxWindow {
		x.slide(id - maxWindow/2)
	}
	k := x.off + int(id-x.base)
	for len(x.buf) <= k {
		if len(x.buf) == cap(x.buf) && x.off > 0 && x.off >= len(x.buf)/2 {
			// Reuse the room left in front rather than grow.
			n := copy(x.buf, x.buf[x.off:])
			clear(x.buf[n:])
			x.buf, k, x.off = x.buf[:n], k-x.off, 0
			continue
		}
		x.buf = append(x.buf, 0)
	}
	x.buf[k] = int32(s) + 1
}

func (x *idIndex) del(id uint64) {
	if id < x.base {
		delete(x.old, id)
		return
	}
	k := id - x.base
	if k >= uint64(len(x.buf)-x.off) {
		return
	}
	x.buf[x.off+int(k)] = 0
	if k == 0 {
		for x.off < len(x.buf) && x.buf[x.off] == 0 {
			x.off++
			x.base++
		}
	}
}

// slide moves the window's start to base, moving the ids before it to the
// map.
func (x *idIndex) slide(base uint64) {
	for x.off < len(x.buf) && x.base < base {
		if v := x.buf[x.off]; v != 0 {
			if x.old == nil {
				x.old = make(map[uint64]int32)
			}
			x.old[x.base] = v - 1
		}
		x.off++
		x.base++
	}
	if x.off == len(x.buf) {
		x.buf, x.off, x.base = x.buf[:0], 0, base
	}
}

type deadlineItem struct {
	at   time.Time
	slot int32
	gen  uint32
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
