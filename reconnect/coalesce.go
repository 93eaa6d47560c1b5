package reconnect

import (
	"net"
	"sync"
	"time"
)

// coalesceLimit bounds what a coalescingConn holds unwritten; a writer
// that finds more than this queued waits for the socket, which is how
// backpressure still reaches the callers. One Write is never split or
// refused: a writer that finds at most coalesceLimit queued appends all of
// p, so the queue can exceed the limit by one Write (a frame of any size
// goes through once the queue ahead of it has been taken by the flusher).
const coalesceLimit = 4 << 20

// coalesceKeep is the largest buffer a coalescingConn keeps for reuse
// while it is busy; a batch that grew past it is dropped once written, so a
// few huge frames do not pin their memory for the connection's life.
const coalesceKeep = coalesceLimit

// coalesceIdleKeep is the largest buffer kept while the connection is idle
// (no flusher running): an idle connection holds at most two of these. It
// is larger than a burst of requests gets under load (about 100 KiB queued
// while a write is under way), so that a pause of 2 ms between bursts does
// not drop the buffers for the next burst to regrow by doubling.
const coalesceIdleKeep = 1 << 20

// flushChunk bounds one write to the socket, so that progress on a slow
// socket is seen a chunk at a time (see liveness) rather than once per batch
// of many MiB.
const flushChunk = 64 << 10

// blockedWrite is how long a socket write must have taken to count as one
// that waited for the socket, where the socket cannot say whether it
// pushed back (not TCP, or not Unix; see pushbackWriter): copying a chunk
// into a socket buffer with room takes microseconds, so a write that took
// this long most likely had to wait until the peer acknowledged earlier
// bytes (see liveness). On a busy host it may only have waited for the CPU.
const blockedWrite = time.Millisecond

// flusherLinger is how long an idle flusher waits for more before it exits:
// long enough that a busy connection keeps one goroutine instead of starting
// one per frame, short enough that an idle one holds none.
const flusherLinger = 2 * time.Millisecond

// coalescingConn turns the shared upstream socket's many small writes into
// few system calls. coder/websocket writes and flushes every frame on its
// own, under its own write lock, so on a socket that many clients share each
// request would cost a system call and the next writer would wait for it.
// Here Write only appends to a buffer; one flusher goroutine, started when
// the buffer goes from empty to not, takes everything that has queued
// meanwhile and writes it out, and exits once the buffer has stayed empty
// for flusherLinger. Bytes keep their order, and the bytes of one Write stay
// together.
//
// Buffers and who owns them (all under mu): buf is the batch being filled,
// appended to by Write only. The flusher takes buf as its batch and, outside
// mu, writes it; while it does, that array is referenced by the flusher alone:
// it is neither buf nor spare. spare is an empty array referenced by nobody,
// or nil; the flusher makes it the next buf (and sets spare to nil) when it
// takes a batch, and puts the written batch back as spare only after the
// socket write has returned, and only if it is not larger than coalesceKeep
// (coalesceIdleKeep once the flusher exits). So no array is ever appended to
// while it is being written, nor handed out twice.
//
// An error from the socket is returned by the next Write (and every one
// after); the connection is broken by then and its reader fails too. Close
// makes every waiting and later Write fail with net.ErrClosed; bytes still
// queued are dropped, as a socket's unsent data is. Write, Read and Close may
// be called concurrently.
type coalescingConn struct {
	net.Conn

	// live, if set, is told of reads and of writes that had to wait for
	// the socket (see liveness). Set by liveness.watch before the conn
	// is used, never changed.
	live *liveness

	mu       sync.Mutex
	drained  sync.Cond     // broadcast when the flusher takes a batch, fails, or exits, and on Close
	buf      []byte        // the batch being filled; appended to by Write
	spare    []byte        // an unreferenced empty array for the next batch, or nil
	writing  bool          // the flusher is writing a batch outside mu
	flushing bool          // a flusher goroutine is running
	err      error         // sticky: the first socket error, or net.ErrClosed after Close
	more     chan struct{} // cap 1: Write added to buf while a flusher runs

	ahead readAhead // owned by the reading goroutine, not guarded by mu

	// ackNow asks the socket to acknowledge at once (see quickack.go), or
	// is nil: not a TCP socket, or the option failed once. Owned by the
	// reading goroutine.
	ackNow func() error

	// writePushed writes a chunk and reports whether the socket pushed
	// back (see pushbackWriter), or is nil: writes are then timed. Used by
	// the flusher only.
	writePushed func(p []byte) (bool, error)
}

func newCoalescingConn(c net.Conn) *coalescingConn {
	cc := &coalescingConn{Conn: c, more: make(chan struct{}, 1), ackNow: quickAcker(c), writePushed: pushbackWriter(c)}
	cc.drained.L = &cc.mu
	return cc
}

// Write queues p and returns len(p), or the connection's error. It waits
// while more than coalesceLimit bytes are queued and not yet taken by the
// flusher.
func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	for c.err == nil && len(c.buf) > coalesceLimit {
		c.drained.Wait()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	c.buf = append(c.buf, p...)
	if !c.flushing {
		c.flushing = true
		go c.flush()
	} else {
		select {
		case c.more <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
	return len(p), nil
}

// Read reads from the socket through a read-ahead buffer (readAhead),
// telling live when bytes arrived, and asks for an immediate
// acknowledgement after a read of a large answer's payload (see
// quickack.go). One goroutine reads.
func (c *coalescingConn) Read(p []byte) (int, error) {
	n, got, err := c.ahead.read(c.Conn, p)
	if c.ackNow != nil && ackLargeReads(p, got) {
		if c.ackNow() != nil {
			c.ackNow = nil // not to be asked again on every read
		}
	}
	if got > 0 && c.live != nil {
		c.live.progressed()
	}
	return n, err
}

// backlogged reports whether bytes are queued or being written, i.e.
// whether a frame written now would wait behind others.
func (c *coalescingConn) backlogged() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil && (c.writing || len(c.buf) > 0)
}

// Close closes the socket. Waiting and later Writes fail with net.ErrClosed.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.drained.Broadcast()
	c.mu.Unlock()
	return c.Conn.Close()
}

// flush is the flusher goroutine: it writes batches until the buffer has
// stayed empty for flusherLinger or the socket fails.
func (c *coalescingConn) flush() {
	linger := time.NewTimer(flusherLinger)
	defer linger.Stop()
	c.mu.Lock()
	for c.err == nil {
		if len(c.buf) == 0 {
			if !c.waitMore(linger) {
				break
			}
			continue // re-check err: Close may have come meanwhile
		}
		out := c.buf
		c.buf, c.spare = c.spare[:0], nil
		c.writing = true
		c.drained.Broadcast() // the queue is empty again: waiting writers may append
		c.mu.Unlock()
		err := c.writeOut(out)
		c.mu.Lock()
		c.writing = false
		if cap(out) <= coalesceKeep {
			c.spare = out[:0]
		}
		if err != nil && c.err == nil {
			c.err = err
		}
	}
	c.flushing = false
	// Idle (or broken): keep no more than a small buffer.
	if cap(c.buf) > coalesceIdleKeep || c.err != nil {
		c.buf = nil
	}
	if cap(c.spare) > coalesceIdleKeep || c.err != nil {
		c.spare = nil
	}
	c.drained.Broadcast()
	c.mu.Unlock()
}

// waitMore waits, without mu, until a Write queues bytes or the connection
// fails, or until the queue has stayed empty for flusherLinger; it reports
// whether to go on. Called and returns with mu held. A signal on more can
// be stale (sent for bytes the flusher took with an earlier batch): it is
// waited past, not taken for the end of the linger, so that a busy
// connection keeps its flusher instead of starting one per batch.
func (c *coalescingConn) waitMore(linger *time.Timer) bool {
	linger.Reset(flusherLinger)
	for len(c.buf) == 0 && c.err == nil {
		c.mu.Unlock()
		select {
		case <-c.more:
			c.mu.Lock()
		case <-linger.C:
			c.mu.Lock()
			return len(c.buf) > 0 || c.err != nil
		}
	}
	return true
}

// writeOut writes out to the socket a chunk at a time. Called by the
// flusher without mu; out belongs to the flusher until it returns.
func (c *coalescingConn) writeOut(out []byte) error {
	for len(out) > 0 {
		n := min(len(out), flushChunk)
		waited, err := c.writeChunk(out[:n])
		if err != nil {
			return err
		}
		out = out[n:]
		if waited && c.live != nil {
			c.live.tookWrite() // the socket made room: the node is taking our bytes
		}
	}
	return nil
}

// writeChunk writes p whole and reports whether it had to wait for the
// socket to make room (see liveness): the socket says so where it can
// (pushbackWriter); elsewhere a write that took blockedWrite is taken for
// one.
func (c *coalescingConn) writeChunk(p []byte) (waited bool, err error) {
	if c.writePushed != nil {
		return c.writePushed(p)
	}
	start := time.Now()
	if _, err := c.Conn.Write(p); err != nil {
		return false, err
	}
	return time.Since(start) >= blockedWrite, nil
}
