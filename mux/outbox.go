package mux

import "sync"

// outbox is a client's bounded outbound queue. Producers (the upstream
// reader, the timeout sweeper, the client's own reader) push without ever
// blocking; the client's writer goroutine (started on demand) takes
// everything queued at once, so that the transport (WebSocket, IPC)
// writes it in one go.
//
// The bound is in bytes. The first message is always accepted whatever its
// size, so a single large response (a block trace) cannot by itself make a
// client a slow consumer; after that, a push that would take the queue past
// the bound fails and the client is to be disconnected. Nothing is ever
// dropped silently.
type outbox struct {
	mu   sync.Mutex
	msgs [][]byte
	// lent[i] is the upstream frame buffer msgs[i] lies in, for the
	// writer to give back to the pool once msgs[i] is written; nil for
	// a message of its own (most). Dropped with msgs otherwise.
	lent   [][]byte
	bytes  int
	limit  int
	closed bool
	wake   chan struct{} // cap 1: something was pushed
}

func newOutbox(limit int) *outbox {
	return &outbox{limit: limit, wake: make(chan struct{}, 1)}
}

// pushLent queues msg, which lies in buf, a frame buffer lent by the
// upstream reader (buf is nil for a message of its own). It reports false
// when the queue is closed or over its bound; the queue is then closed.
func (q *outbox) pushLent(msg, buf []byte) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	if q.bytes > 0 && q.bytes+len(msg) > q.limit {
		q.closed = true
		q.msgs, q.lent = nil, nil
		q.bytes = 0
		q.mu.Unlock()
		return false
	}
	q.msgs = append(q.msgs, msg)
	if buf != nil || q.lent != nil {
		// lent is kept as long as msgs only while a lent buffer is queued
		for len(q.lent) < len(q.msgs)-1 {
			q.lent = append(q.lent, nil)
		}
		q.lent = append(q.lent, buf)
	}
	q.bytes += len(msg)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// takeLent moves everything queued into dst (reused) and returns it, with,
// in lent (reused), the lent buffer of each message taken (nil for most;
// lent is empty when none is). The bytes stay counted until done is called,
// so that a writer stuck on a client that does not read still holds its
// share of the bound.
func (q *outbox) takeLent(dst, lent [][]byte) ([][]byte, [][]byte) {
	q.mu.Lock()
	dst = append(dst[:0], q.msgs...)
	clear(q.msgs)
	q.msgs = q.msgs[:0]
	lent = append(lent[:0], q.lent...)
	clear(q.lent)
	q.lent = q.lent[:0]
	if cap(q.lent) > maxKeptLent {
		q.lent = nil
	}
	q.mu.Unlock()
	return dst, lent
}

// maxKeptLent bounds the lent list an outbox keeps between takes.
const maxKeptLent = 64

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
	q.msgs, q.lent = nil, nil
	q.mu.Unlock()
}

// pending is the number of bytes queued or being written.
func (q *outbox) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes
}

// hasQueued reports whether messages wait to be taken.
func (q *outbox) hasQueued() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs) > 0
}
