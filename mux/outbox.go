package mux

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/router"
)

// outMsg is one message queued for a client: msg, or, when id is set, msg
// with the bytes at at replaced by id (a push shared by every subscriber of
// its key, spliced by each client's writer). lent is the upstream frame
// buffer msg lies in, for the writer to give back to the pool once msg is
// written; nil for most. arena is the batch arena msg lies in
// (core.Delivery.Arena), for the writer to give back to the server's
// arenaPool once msg is written.
type outMsg struct {
	msg   []byte
	at    router.Span
	id    []byte
	lent  []byte
	arena []byte
	push  bool // a subscription push, not an answer (core.Delivery.Push)
}

// release gives back to s's pools the buffers m borrowed (a lent upstream
// frame, a batch arena), once m is written or will never be.
func (s *Server) release(m *outMsg) {
	if m.lent != nil {
		s.frames.put(m.lent)
	}
	if m.arena != nil {
		s.arenas.put(m.arena)
	}
}

// size is the length of the message as the client gets it.
func (m *outMsg) size() int {
	if m.id == nil {
		return len(m.msg)
	}
	return len(m.msg) - m.at.Len + len(m.id)
}

// appendTo appends the message as the client gets it to dst.
func (m *outMsg) appendTo(dst []byte) []byte {
	if m.id == nil {
		return append(dst, m.msg...)
	}
	return router.AppendSpliced(dst, m.msg, m.at, m.id)
}

// outbox is a client's bounded outbound queue. Producers (the upstream
// reader, the timeout sweeper, the client's own reader) push without ever
// blocking; the client's writer goroutine (started on demand) takes
// everything queued at once, so that the transport (WebSocket, IPC)
// writes it in one go.
//
// Each message comes numbered by the routing core (core.Delivery.Seq), and
// they are queued in that order: producers apply the effects of different
// events on different goroutines, after the lock around the core is
// released, and one that comes early waits (parked) for those before it.
//
// The bound (limit) is in bytes queued or being written, and it is kept
// apart for what the client asked for and what it did not:
//
//   - Answers to its own requests may take the queue past limit, as far
//     as the budget shared by all clients for what their queues hold past
//     their own bound allows (queueBudget): a client that pipelines large
//     calls and reads their answers more slowly than the node sends them
//     gets them all, as from a node, which writes to a slow client as it
//     reads. A client past limit that takes nothing is cut by
//     Client.watchStall, as a node cuts a client it cannot write to.
//   - Subscription pushes: a push that would take the pushes queued past
//     limit fails, and the client is to be disconnected: it is not the
//     client's pace that sets theirs. (A push behind answers past limit
//     also needs room in the shared budget.)
//
// The first message is always accepted whatever its size, so a single
// large response (a block trace) cannot by itself make a client a slow
// consumer. Nothing is ever dropped silently. A parked message is not
// checked against the bound: which goroutine applied its effects first is
// not the client's doing. It is queued with those before it once they
// come, and counts from then on. (Parking is brief: a message waits only
// for one an event already being applied holds, so what is parked is
// bounded by what the core produced for the client meanwhile.)
type outbox struct {
	mu     sync.Mutex
	msgs   []outMsg
	parked map[uint64]outMsg // came before their turn
	next   uint64            // the Seq of the next message to queue
	bytes  int               // queued or being written
	pushes int               // of bytes, those of pushes
	held   int               // parked
	limit  int
	// exempt is the size of the message accepted into an empty queue, until
	// it is written (the oldest, so in the next write): it is held against
	// neither the bound nor the budget, so a single large answer cannot by
	// itself make a client slow nor use up what others share.
	exempt     int
	exemptPush bool // that message is a push
	budget     *queueBudget
	excess     int // bytes past limit (exempt aside), charged to budget
	closed     bool
	wake       chan struct{} // cap 1: something was queued
}

// queueBudget bounds what all clients' queues hold past their own bound
// together (outbound_queue_bytes_total): a client that pipelines large
// calls may be slow to read them, but not so many that muxd's memory is at
// risk. Safe for concurrent use.
type queueBudget struct {
	max   int64
	used  atomic.Int64
	gauge prometheus.Gauge // shows used; nil in tests
}

// take charges n bytes, or reports false (charging nothing) when that
// would pass the budget.
func (b *queueBudget) take(n int) bool {
	for {
		used := b.used.Load()
		if used+int64(n) > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+int64(n)) {
			b.show()
			return true
		}
	}
}

// give returns n bytes (n may be negative: more charged, unchecked).
func (b *queueBudget) give(n int) {
	b.used.Add(-int64(n))
	b.show()
}

// show sets the gauge to what is used. Called only when that changes: a
// queue past its bound.
func (b *queueBudget) show() {
	if b.gauge != nil {
		b.gauge.Set(float64(b.used.Load()))
	}
}

func newOutbox(limit int, budget *queueBudget) *outbox {
	return &outbox{limit: limit, budget: budget, next: 1, wake: make(chan struct{}, 1)}
}

// push queues m, the client's seq'th message. It reports false when the
// queue is closed or m would take it past its bound (see outbox); the
// queue is then closed. over reports whether the queue is now past limit,
// the message accepted into an empty queue aside (exempt): a single large
// answer, however slow to write, is not held against the client.
func (q *outbox) push(seq uint64, m outMsg) (ok, over bool) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false, false
	}
	n := m.size()
	if seq != q.next {
		if q.parked == nil {
			q.parked = make(map[uint64]outMsg)
		}
		q.parked[seq] = m
		q.held += n
		q.mu.Unlock()
		return true, false
	}
	if q.bytes == 0 {
		q.exempt, q.exemptPush = n, m.push
	}
	if !q.fits(&m, n) {
		q.closed = true
		q.msgs, q.parked = nil, nil
		q.bytes, q.pushes, q.held = 0, 0, 0
		q.settleLocked()
		q.mu.Unlock()
		return false, false
	}
	q.add(m, n)
	for len(q.parked) > 0 {
		pm, ok := q.parked[q.next]
		if !ok {
			break
		}
		delete(q.parked, q.next)
		pn := pm.size()
		q.held -= pn
		q.add(pm, pn)
	}
	q.settleLocked()
	over = q.overLocked()
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true, over
}

// fits reports whether m, of size n, may be queued (see outbox), and
// charges what it takes the queue past limit to the shared budget. Called
// with mu held.
func (q *outbox) fits(m *outMsg, n int) bool {
	pushes := q.pushes
	if q.exemptPush {
		pushes -= q.exempt
	}
	switch {
	case q.bytes == 0:
		return true
	case m.push && pushes+n > q.limit:
		return false
	}
	if more := max(q.bytes+n-q.limit-q.exempt, 0) - q.excess; more > 0 {
		if !q.budget.take(more) {
			return false
		}
		q.excess += more
	}
	return true
}

// settleLocked brings what the queue has charged to the shared budget in
// line with what it holds past limit (nothing once closed). Called with mu
// held after every change of bytes.
func (q *outbox) settleLocked() {
	want := 0
	if !q.closed {
		want = max(q.bytes-q.limit-q.exempt, 0)
	}
	if d := q.excess - want; d != 0 {
		q.budget.give(d)
		q.excess = want
	}
}

// add queues m, of size n, as the next message. Called with mu held.
func (q *outbox) add(m outMsg, n int) {
	q.bytes += n
	if m.push {
		q.pushes += n
	}
	q.msgs = append(q.msgs, m)
	q.next++
}

// take moves what is queued into dst (reused) and returns it: the oldest
// messages, up to maxTake bytes or one message, and only one while the
// queue is past its bound, so that each message written shows the client
// is taking them (Client.watchStall judges by writes done, as geth gives
// each message its own write deadline). The bytes stay counted until done
// is called, so that a writer stuck on a client that does not read still
// holds its share of the bound.
func (q *outbox) take(dst []outMsg) []outMsg {
	q.mu.Lock()
	most := maxTake
	if q.overLocked() {
		most = 0
	}
	k, size := 0, 0
	for ; k < len(q.msgs); k++ {
		n := q.msgs[k].size()
		if k > 0 && size+n > most {
			break
		}
		size += n
	}
	dst = append(dst[:0], q.msgs[:k]...)
	clear(q.msgs[:k])
	if k == len(q.msgs) {
		q.msgs = reuse(q.msgs[:0], maxKeptQueue)
	} else {
		q.msgs = q.msgs[k:] // the array's front is freed once the rest is taken
	}
	q.mu.Unlock()
	return dst
}

// maxTake bounds the bytes of messages one take returns (at least one
// message is, whatever its size): a writer's write of them then ends, and
// shows the client is taking what it is sent (Client.watchStall, the
// keepalive), however much is queued behind.
const maxTake = 1 << 20

// maxKeptQueue bounds the queue slice an outbox keeps between takes.
const maxKeptQueue = 64

// done releases n bytes taken by the writer and written, pushes of them
// bytes of pushes.
func (q *outbox) done(n, pushes int) {
	q.mu.Lock()
	q.bytes -= n
	q.pushes -= pushes
	q.exempt, q.exemptPush = 0, false // it was the oldest: in this write
	q.settleLocked()
	q.mu.Unlock()
}

// over reports whether more than limit bytes are queued or being written,
// the message accepted into an empty queue aside (see exempt).
func (q *outbox) over() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.overLocked()
}

func (q *outbox) overLocked() bool { return !q.closed && q.bytes-q.exempt > q.limit }

// close stops the queue; later pushes fail.
func (q *outbox) close() {
	q.mu.Lock()
	q.closed = true
	q.msgs, q.parked = nil, nil
	q.held = 0
	q.exempt, q.exemptPush = 0, false
	q.settleLocked()
	q.mu.Unlock()
}

// caughtUp reports whether every message up to the seq'th has been queued
// and written.
func (q *outbox) caughtUp(seq uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.next > seq && q.bytes == 0
}

// hasQueued reports whether messages wait to be taken.
func (q *outbox) hasQueued() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs) > 0
}
