package mux

import (
	"context"
	"sync"

	"github.com/coder/websocket"
)

// maxKeptSendQueue bounds each of the two buffers an upstream send queue
// keeps between bursts: large enough for a burst of many clients' requests
// (tens to hundreds of KiB while the writer waits for a core), which would
// otherwise be regrown by doubling after every pause. A burst that queued
// a large request lets its buffer go.
const maxKeptSendQueue = 1 << 20

// sendQueueLimit is how much a send queue holds, queued and being written,
// before a send waits for the writer to finish what it took: while the node
// does not read, the writer waits on the socket (behind reconnect's own
// buffer of 4 MiB), and senders wait here, as they waited on the socket
// before there was a queue. A send that finds at most this much appends
// all its frames, so a frame of any size goes through once what is ahead
// of it has been written.
const sendQueueLimit = 2 << 20

// smallSend is the most a send may carry and count as small. A small send
// waits only while the small sends queued ahead of it pass
// sendQueueLimit, and a large one while the large ones do (sendQueue.full),
// not behind the large requests other clients queued: a
// client sending requests of 30 MiB fills the queue for as long as the
// node takes to read one, and every other client's eth_blockNumber would
// wait that long for room (seconds, where the node itself answers it in
// milliseconds). It still waits in the socket behind what was queued
// before it.
const smallSend = 64 << 10

// sendQueue gives an upstream connection one writer at a time. A send
// while no one writes makes its caller the writer: it writes its own
// frames, from its own memory, and leaves whatever others queued meanwhile
// to a writer goroutine, which writes until the queue is empty and then
// exits. A send while someone writes copies its frames into the queue and
// returns, at once unless the queue is full (sendQueueLimit).
//
// Why: coder/websocket serializes a connection's writers with a lock handed
// from one goroutine to the next. Were every client's reader to write its
// own requests upstream, under load dozens of readers would queue on that
// lock, each hand-over waiting for the next owner to be scheduled. Copying
// a request into the queue costs far less than such a wait, and the writer
// goroutine writes whatever has queued in one go. A lone request is still
// written by its client's reader, with no hand-over.
//
// A send from anywhere but a client's reader (sendNoWait) neither waits
// nor writes: it queues, and starts the writer goroutine if none is
// running.
//
// Frames of one send go in order, and sends in the order they take the
// queue's lock. mu guards every field; the writer owns the buffers it has
// swapped out until it gives them back as the spares.
type sendQueue struct {
	mu      sync.Mutex
	writing bool   // a sender or the writer goroutine is writing
	buf     []byte // queued messages, back to back
	ends    []int  // the end of each queued message in buf
	spare   []byte // the writer's last buffer, for the next swap
	spareEn []int  // the same for ends
	broken  bool   // a write failed: the rest is dropped
	// writingQueued is the size of the batch the writer goroutine took
	// and is writing: it counts against sendQueueLimit until written.
	writingQueued int
	// smallQueued and smallWriting are the bytes of small sends
	// (smallSend) in buf and in the batch being written: what a small
	// send waits on.
	smallQueued, smallWriting int
	// written is broadcast when the writer has written a batch or
	// breaks: a send waiting on a full queue looks again. (A writer that
	// finds the queue empty has none waiting.) Its L is set to &mu by the
	// first send that waits.
	written sync.Cond
}

// send writes frames upstream on u, in order (see sendQueue); the caller
// may reuse them once send returns. A write error means the connection is
// broken: it is closed, so that the reader fails and the connection is
// replaced, and whatever is still queued is dropped. The requests written
// or dropped are then dealt with by the loss handling, like every other
// request in flight on it. send on a nil connection does nothing (the
// requests were queued to wait instead).
func (u *upstreamConn) send(frames ...[]byte) {
	if u == nil || len(frames) == 0 {
		return
	}
	q := &u.sq
	small := sendSize(frames) <= smallSend
	q.mu.Lock()
	for q.writing && !q.broken && q.full(small) {
		if q.written.L == nil {
			q.written.L = &q.mu
		}
		q.written.Wait()
	}
	if q.broken {
		q.mu.Unlock()
		return
	}
	if q.writing {
		q.queueLocked(frames)
		q.mu.Unlock()
		return
	}
	q.writing = true
	q.mu.Unlock()
	ok := true
	for _, f := range frames {
		if ok = u.writeFrame(f); !ok {
			break
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !ok {
		q.breakLocked()
	}
	if len(q.ends) == 0 {
		q.writing = false
		return
	}
	// Others queued while this caller wrote: a goroutine of its own
	// writes them, so that this client's reader goes back to its client.
	go u.writeQueued()
}

// full reports whether a send, small or not, must wait for the writer:
// small and large sends each count only their own kind against
// sendQueueLimit, so that neither starves the other (large sends racing
// a steady stream of small ones for room would lose every time).
func (q *sendQueue) full(small bool) bool {
	smallBytes := q.smallQueued + q.smallWriting
	if small {
		return smallBytes > sendQueueLimit
	}
	return len(q.buf)+q.writingQueued-smallBytes > sendQueueLimit
}

// sendNoWait queues frames upstream on u, in order, and returns at once:
// it never waits for room in the queue and never writes itself (a write
// waits for the node to read). It is how every goroutine but a client's
// reader sends (apply): the upstream reader sending a request of muxd's own
// on a new head, or the next array of a batch, must go on reading even
// while clients' large requests fill the queue. What it adds past
// sendQueueLimit is bounded by what the core holds: requests it admitted
// within their limits, and its own, a few per head.
func (u *upstreamConn) sendNoWait(frames ...[]byte) {
	if u == nil || len(frames) == 0 {
		return
	}
	q := &u.sq
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.broken {
		return
	}
	q.queueLocked(frames)
	if !q.writing {
		q.writing = true
		go u.writeQueued()
	}
}

// queueLocked copies frames to the end of the queue (the caller may reuse
// them once its send returns), counting them in smallQueued when they are
// a small send.
func (q *sendQueue) queueLocked(frames [][]byte) {
	start := len(q.buf)
	for _, f := range frames {
		q.buf = append(q.buf, f...)
		q.ends = append(q.ends, len(q.buf))
	}
	if n := len(q.buf) - start; n <= smallSend {
		q.smallQueued += n
	}
}

// sendSize is the bytes a send carries.
func sendSize(frames [][]byte) (n int) {
	for _, f := range frames {
		n += len(f)
	}
	return n
}

// writeQueued is the writer goroutine: it writes what is queued until the
// queue is empty, or drops it all once a write fails.
func (u *upstreamConn) writeQueued() {
	q := &u.sq
	for {
		q.mu.Lock()
		if len(q.ends) == 0 {
			q.writing = false
			q.mu.Unlock()
			return
		}
		buf, ends := q.buf, q.ends
		q.buf, q.ends = q.spare[:0], q.spareEn[:0]
		q.writingQueued = len(buf)
		q.smallWriting, q.smallQueued = q.smallQueued, 0
		q.mu.Unlock()

		ok, from := true, 0
		for _, end := range ends {
			if ok = u.writeFrame(buf[from:end]); !ok {
				break
			}
			from = end
		}

		q.mu.Lock()
		q.spare, q.spareEn = reuse(buf, maxKeptSendQueue), reuse(ends, maxKeptSendQueue/64)
		q.writingQueued, q.smallWriting = 0, 0
		q.written.Broadcast()
		if !ok {
			q.breakLocked()
		}
		q.mu.Unlock()
	}
}

// breakLocked records a failed write: what is queued is dropped, and so
// is every later send.
func (q *sendQueue) breakLocked() {
	q.broken = true
	q.buf, q.ends = nil, nil
	q.smallQueued = 0
	q.written.Broadcast()
}

// writeFrame writes one message upstream; on failure it closes the
// connection (once) and reports false.
func (u *upstreamConn) writeFrame(f []byte) bool {
	// Not u.ctx: coder/websocket watches a cancellable context with an
	// AfterFunc on every call, a real cost per frame; the connection is
	// closed to stop a write instead (readUpstream).
	if err := u.Write(context.Background(), websocket.MessageText, f); err != nil {
		u.failed.Do(func() {
			u.srv.log.Warn("upstream write failed", "gen", u.Gen, "err", err)
			u.CloseNow()
		})
		return false
	}
	u.srv.metrics.UpstreamFramesOut.Inc()
	return true
}
