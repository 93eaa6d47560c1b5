package mux

import (
	"context"
	"runtime"
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
// does not read, the writer waits on the socket, and senders wait here, as
// they waited on the socket before there was a queue. It is the connection's
// only bound on what muxd holds unwritten (beyond the socket's own buffers,
// reconnect holds at most about two chunks of 64 KiB between Cork and
// Flush). A send that finds at most this much appends all its frames, so a
// frame of any size goes through once what is ahead of it has been written.
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

// sendQueue gives an upstream connection its one queue and one writer at a
// time, in the manner of derp's sendLoop: the writer writes frames into the
// socket's buffer (reconnect's Cork) and flushes it (Flush) only when the
// queue is empty, so that what queued while it wrote goes out in few system
// calls, and nothing waits for a timer. There is no writer goroutine
// between turns: a send while no one writes makes its caller the writer,
// which writes its own frames, from its own memory, and, when no one queued
// meanwhile, flushes them itself (a lone request reaches the socket with no
// hand-over); when others queued meanwhile it leaves them, unflushed, to a
// writer goroutine, which writes until the queue is empty, flushes, and
// exits. A send while someone writes copies its frames into the queue and
// returns, at once unless the queue is full (sendQueueLimit). Before it
// flushes, a writer yields once (runtime.Gosched), so that clients' readers
// ready to run queue their frames into the same write (under load, many
// more sends share a write; BenchmarkUpstreamSendBurst reports write system
// calls per send); alone, the writer is back at once.
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
// Failure: a write or flush that fails breaks the queue (what is queued is
// dropped, and every later send) and closes the connection, once, so that
// its reader fails and the connection is replaced (writeFailed). keepalive
// sees the writer at work through the socket (corked, or writing), and
// holds its ping while it is.
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
	u.Cork()
	ok := true
	for _, f := range frames {
		if ok = u.writeFrame(f); !ok {
			break
		}
	}
	u.endTurn(ok, true)
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
// queue is empty, or drops it all once a write fails (endTurn).
func (u *upstreamConn) writeQueued() {
	u.Cork()
	u.endTurn(true, false)
}

// endTurn is the rest of a writer's turn, once it has written what it
// took (ok: without error): it writes what others queued meanwhile, a batch
// at a time, without flushing between batches; once the queue is empty it
// flushes the socket, and the turn ends when nothing queued during the
// flush either. A sender (handOff) that finds others queued leaves them to
// a writer goroutine, unflushed, and goes back to its client.
func (u *upstreamConn) endTurn(ok, handOff bool) {
	q := &u.sq
	yielded := false
	for {
		q.mu.Lock()
		if !ok {
			q.breakLocked()
		}
		if len(q.ends) > 0 {
			if handOff {
				q.mu.Unlock()
				go u.writeQueued()
				return
			}
			ok = u.writeBatchLocked()
			continue
		}
		if !ok {
			q.writing = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		if !yielded {
			// Let the goroutines that are ready to run (clients' readers
			// with requests read) queue theirs first, to go out in the
			// same write. Alone, the writer is back at once.
			yielded = true
			runtime.Gosched()
			continue
		}
		yielded = false
		// Nothing more queued: put what the socket holds on the wire.
		if err := u.Flush(); err != nil {
			u.writeFailed(err)
			ok = false
			continue
		}
		q.mu.Lock()
		if len(q.ends) == 0 || q.broken {
			q.writing = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		u.Cork() // queued during the flush: another round
	}
}

// writeBatchLocked takes what is queued and writes it; called with q.mu
// held, it returns without, reporting whether every write succeeded.
func (u *upstreamConn) writeBatchLocked() bool {
	q := &u.sq
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
	q.mu.Unlock()
	return ok
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
		u.writeFailed(err)
		return false
	}
	u.srv.metrics.UpstreamFramesOut.Inc()
	return true
}

// writeFailed closes the connection after a failed write or flush (once):
// its reader then fails, and the connection is lost.
func (u *upstreamConn) writeFailed(err error) {
	u.failed.Do(func() {
		u.srv.log.Warn("upstream write failed", "gen", u.Gen, "err", err)
		u.CloseNow()
	})
}
