// Package fairq is a deficit round robin queue (Shreedhar and Varghese,
// "Efficient fair queuing using deficit round robin", SIGCOMM 1995): items
// wait in one FIFO per flow, and Pop serves the flows that have items in
// turn, each flow's share in proportion to its weight, measured in the
// items' cost (whatever unit the caller chooses: one call, one element of
// a batch).
//
// A flow that is served is credited its quantum (its weight) on each
// visit of the round and spends it on the items it takes; an item costing
// more than it holds waits for later rounds while the other flows are
// served. So a flow with thousands of items queued delays a flow with one
// by at most one visit of each other busy flow: with every weight 1 and
// items of cost 1, the round alternates between them item by item. A
// flow's credit is dropped when it has nothing queued, so that an idle
// flow does not bank a share for later.
//
// Like package core, fairq is sans-I/O (core's TestSansIO checks it): no
// goroutines, locks, I/O or clock. A Queue is not safe for concurrent use.
package fairq

// Queue is a deficit round robin queue of items of type T over flows named
// by a uint64. The zero value is an empty queue.
type Queue[T any] struct {
	flows map[uint64]*flow[T]
	// cur is the flow the round is at (nil: none has items); the flows
	// with items form a ring through next and prev.
	cur *flow[T]
	// visiting says cur has been credited its quantum for this visit.
	visiting bool
	n        int        // items queued
	cost     int        // their cost
	spare    []*flow[T] // emptied flows, for reuse
}

type flow[T any] struct {
	id         uint64
	weight     int
	deficit    int
	items      []entry[T]
	head       int // items[head:] are queued
	next, prev *flow[T]
}

type entry[T any] struct {
	item T
	cost int
}

// Len is the number of items queued.
func (q *Queue[T]) Len() int { return q.n }

// Cost is the cost of the items queued.
func (q *Queue[T]) Cost() int { return q.cost }

// Flows is the number of flows with items queued.
func (q *Queue[T]) Flows() int { return len(q.flows) }

// FlowLen is the number of items flow id has queued.
func (q *Queue[T]) FlowLen(id uint64) int {
	if f := q.flows[id]; f != nil {
		return len(f.items) - f.head
	}
	return 0
}

// Push queues item at the back of flow id, at cost (at least 1) and with
// the flow's weight (at least 1; the weight given last is the flow's).
func (q *Queue[T]) Push(id uint64, weight int, item T, cost int) {
	cost = max(cost, 1)
	f := q.flows[id]
	if f == nil {
		f = q.newFlow(id)
		q.link(f)
	}
	f.weight = max(weight, 1)
	f.items = append(f.items, entry[T]{item, cost})
	q.n++
	q.cost += cost
}

// Pop takes the next item in deficit round robin order, and returns it
// with its flow's id; ok is false when the queue is empty.
func (q *Queue[T]) Pop() (item T, id uint64, ok bool) {
	if q.cur == nil {
		return item, 0, false
	}
	passed := 0 // flows passed over since an item was taken
	for {
		f := q.cur
		if !q.visiting {
			f.deficit += f.weight
			q.visiting = true
		}
		if e := f.items[f.head]; e.cost <= f.deficit {
			f.deficit -= e.cost
			id := f.id
			q.take(f) // may retire f
			return e.item, id, true
		}
		q.cur, q.visiting = f.next, false
		if passed++; passed >= len(q.flows) {
			// A whole round went by with nothing affordable: the
			// rounds it takes for the cheapest item to become so are
			// credited at once rather than walked one by one.
			q.skipRounds()
			passed = 0
		}
	}
}

// skipRounds credits every flow with the quanta of the rounds before the
// first flow of the ring could afford its next item, less the one its next
// visit credits.
func (q *Queue[T]) skipRounds() {
	rounds := -1
	f := q.cur
	for range len(q.flows) {
		need := f.items[f.head].cost - f.deficit
		if r := (need+f.weight-1)/f.weight - 1; rounds < 0 || r < rounds {
			rounds = r
		}
		f = f.next
	}
	if rounds <= 0 {
		return
	}
	for range len(q.flows) {
		f.deficit += rounds * f.weight
		f = f.next
	}
}

// take removes f's first item, and f from the ring once it has none.
func (q *Queue[T]) take(f *flow[T]) {
	e := &f.items[f.head]
	q.n--
	q.cost -= e.cost
	*e = entry[T]{}
	f.head++
	if f.head == len(f.items) {
		q.retire(f)
		return
	}
	if f.head >= 64 && f.head*2 >= len(f.items) {
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
}

// Drop removes every item of flow id, calling fn (when not nil) with each
// in order, and returns how many there were.
func (q *Queue[T]) Drop(id uint64, fn func(T)) int {
	f := q.flows[id]
	if f == nil {
		return 0
	}
	n := len(f.items) - f.head
	for i := f.head; i < len(f.items); i++ {
		q.cost -= f.items[i].cost
		if fn != nil {
			fn(f.items[i].item)
		}
	}
	q.n -= n
	q.retire(f)
	return n
}

// Clear removes every item, calling fn (when not nil) with each, flow by
// flow in round order.
func (q *Queue[T]) Clear(fn func(T)) {
	for q.cur != nil {
		q.Drop(q.cur.id, fn)
	}
}

func (q *Queue[T]) newFlow(id uint64) *flow[T] {
	if q.flows == nil {
		q.flows = map[uint64]*flow[T]{}
	}
	var f *flow[T]
	if k := len(q.spare); k > 0 {
		f, q.spare = q.spare[k-1], q.spare[:k-1]
	} else {
		f = new(flow[T])
	}
	f.id = id
	q.flows[id] = f
	return f
}

// link adds f to the ring just before the flow the round is at: it is
// served last in the current round.
func (q *Queue[T]) link(f *flow[T]) {
	if q.cur == nil {
		f.next, f.prev = f, f
		q.cur, q.visiting = f, false
		return
	}
	f.next, f.prev = q.cur, q.cur.prev
	q.cur.prev.next = f
	q.cur.prev = f
}

// retire takes f, whose items are gone, out of the ring and the flows, and
// keeps its memory for another flow. Its credit goes with it.
func (q *Queue[T]) retire(f *flow[T]) {
	if f.next == f {
		q.cur, q.visiting = nil, false
	} else {
		f.prev.next, f.next.prev = f.next, f.prev
		if q.cur == f {
			q.cur, q.visiting = f.next, false
		}
	}
	delete(q.flows, f.id)
	clear(f.items)
	items := f.items[:0]
	if cap(items) > 1024 {
		items = nil // a flood's backlog is not kept for the next flow
	}
	*f = flow[T]{items: items}
	q.spare = append(q.spare, f)
}
