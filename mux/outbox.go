package mux

import (
	"sync"

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
// The bound is in bytes queued or being written. The first message is
// always accepted whatever its size, so a single large response (a block
// trace) cannot by itself make a client a slow consumer; after that, a push
// that would take the queue past the bound fails and the client is to be
// disconnected. Nothing is ever dropped silently. A parked message is not
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
	held   int               // parked
	limit  int
	closed bool
	wake   chan struct{} // cap 1: something was queued
}

func newOutbox(limit int) *outbox {
	return &outbox{limit: limit, next: 1, wake: make(chan struct{}, 1)}
}

// push queues m, the client's seq'th message. It reports false when the
// queue is closed or over its bound; the queue is then closed.
func (q *outbox) push(seq uint64, m outMsg) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	n := m.size()
	if seq != q.next {
		if q.parked == nil {
			q.parked = make(map[uint64]outMsg)
		}
		q.parked[seq] = m
		q.held += n
		q.mu.Unlock()
		return true
	}
	if q.bytes > 0 && q.bytes+n > q.limit {
		q.closed = true
		q.msgs, q.parked = nil, nil
		q.bytes, q.held = 0, 0
		q.mu.Unlock()
		return false
	}
	q.bytes += n
	q.msgs = append(q.msgs, m)
	q.next++
	for len(q.parked) > 0 {
		pm, ok := q.parked[q.next]
		if !ok {
			break
		}
		delete(q.parked, q.next)
		pn := pm.size()
		q.held -= pn
		q.bytes += pn
		q.msgs = append(q.msgs, pm)
		q.next++
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// take moves everything queued into dst (reused) and returns it. The bytes
// stay counted until done is called, so that a writer stuck on a client
// that does not read still holds its share of the bound.
func (q *outbox) take(dst []outMsg) []outMsg {
	q.mu.Lock()
	dst = append(dst[:0], q.msgs...)
	clear(q.msgs)
	q.msgs = reuse(q.msgs, maxKeptQueue)
	q.mu.Unlock()
	return dst
}

// maxKeptQueue bounds the queue slice an outbox keeps between takes.
const maxKeptQueue = 64

// done releases n bytes taken by the writer and written.
func (q *outbox) done(n int) {
	q.mu.Lock()
	q.bytes -= n
	q.mu.Unlock()
}

// close stops the queue; later pushes fail.
func (q *outbox) close() {
	q.mu.Lock()
	q.closed = true
	q.msgs, q.parked = nil, nil
	q.held = 0
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
