package reconnect

import (
	"net"
	"sync"
	"time"
)

// flushChunk is the most a corked coalescingConn holds before it writes to
// the socket, and the most one socket write carries: progress on a slow
// socket is seen a chunk at a time (see liveness), and the conn holds at
// most about two chunks, whatever the size of the frames written through
// it.
const flushChunk = 64 << 10

// blockedWrite is how long a socket write must have taken to count as one
// that waited for the socket, where the socket cannot say whether it
// pushed back (not TCP, or not Unix; see pushbackWriter): copying a chunk
// into a socket buffer with room takes microseconds, so a write that took
// this long most likely had to wait until the peer acknowledged earlier
// bytes (see liveness). On a busy host it may only have waited for the CPU.
const blockedWrite = time.Millisecond

// coalescingConn is the upstream socket under coder/websocket: it lets the
// connection's one writer (muxd's send queue, mux/upstream_send.go) put many
// frames into one system call, and reports reads and writes to keepalive
// (see liveness). It has no goroutine and no queue of its own.
//
// coder/websocket writes every frame through a 4 KiB buffer that it flushes
// at the end of the frame, so each frame costs at least one Write here. While
// the conn is corked (Cork), Write only appends to a buffer, and writes it out
// once it holds flushChunk; Flush writes out the rest and uncorks. The writer
// corks before it writes the frames it has and flushes once it has no more,
// as derp's sendLoop flushes its bufio.Writer when its queue is empty. A
// frame written while the conn is not corked (a ping, a pong, a close frame
// with no writer at work) goes to the socket at once. Frames are never split
// or merged at the WebSocket level: each stays its own message, and only the
// bytes of several go out in one write.
//
// Concurrency: coder/websocket serializes its frames (the writer's messages,
// pongs from the reader, keepalive's ping and probe, the close frame), so
// Writes never overlap; Flush, called by the writer after coder/websocket
// returned, may overlap a Write. wmu is held for every socket write, and the
// buffer is taken under it, so bytes reach the socket in the order they were
// written. Write, Read, Close, Cork and Flush may be called concurrently.
//
// Buffers (under mu): buf is appended to by Write; a socket write takes it
// whole under wmu, makes spare the next buf, and gives the written array
// back as spare once the write has returned, so no array is appended to
// while it is being written. Both stay below 2 × flushChunk: a Write of
// flushChunk or more is written from the caller's memory, after the buffer.
//
// An error from the socket is sticky: every later Write and Flush returns
// it; the connection is broken by then and its reader fails too. Close makes
// them fail with net.ErrClosed; bytes still held are dropped, as a socket's
// unsent data is.
type coalescingConn struct {
	net.Conn

	// live, if set, is told of reads and of writes that had to wait for
	// the socket (see liveness). Set by liveness.watch before the conn
	// is used, never changed.
	live *liveness

	wmu     sync.Mutex // held while writing to the socket; taken before mu
	mu      sync.Mutex
	corked  bool   // Write appends to buf (Cork until Flush)
	writing bool   // a socket write is under way
	buf     []byte // bytes written while corked, not yet taken
	spare   []byte // an unreferenced empty array for the next buf, or nil
	err     error  // sticky: the first socket error, or net.ErrClosed after Close

	ahead readAhead // owned by the reading goroutine, not guarded by mu

	// ackNow asks the socket to acknowledge at once (see quickack.go), or
	// is nil: not a TCP socket, or the option failed once. Owned by the
	// reading goroutine.
	ackNow func() error

	// writePushed writes a chunk and reports whether the socket pushed
	// back (see pushbackWriter), or is nil: writes are then timed. Called
	// under wmu only.
	writePushed func(p []byte) (bool, error)
}

func newCoalescingConn(c net.Conn) *coalescingConn {
	return &coalescingConn{Conn: c, ackNow: quickAcker(c), writePushed: pushbackWriter(c)}
}

// Cork makes Write hold what it is given until Flush (or until flushChunk
// is held). Called by the connection's writer before it writes.
func (c *coalescingConn) Cork() {
	c.mu.Lock()
	if c.err == nil {
		c.corked = true
	}
	c.mu.Unlock()
}

// Flush writes out what Write held and uncorks, and returns the
// connection's error, if any. Called by the writer that corked, once it
// has nothing more to write.
func (c *coalescingConn) Flush() error {
	for {
		c.wmu.Lock()
		c.mu.Lock()
		if len(c.buf) == 0 || c.err != nil {
			c.corked = false
			err := c.err
			c.mu.Unlock()
			c.wmu.Unlock()
			return err
		}
		c.writeHeldLocked(nil)
		c.wmu.Unlock()
	}
}

// Write writes p to the socket, or, while corked, appends it to what is
// held (writing that out once it reaches flushChunk).
func (c *coalescingConn) Write(p []byte) (int, error) {
	n := len(p)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	if c.corked && len(p) < flushChunk {
		c.buf = append(c.buf, p...)
		full := len(c.buf) >= flushChunk
		c.mu.Unlock()
		if !full {
			return n, nil
		}
		p = nil // held: write out the buffer alone
	} else {
		c.mu.Unlock()
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if err := c.writeHeldLocked(p); err != nil {
		return 0, err
	}
	return n, nil
}

// writeHeldLocked writes out the buffer, then p, to the socket. Called with
// wmu and mu held; returns with wmu held and mu released.
func (c *coalescingConn) writeHeldLocked(p []byte) error {
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	out := c.buf
	c.buf, c.spare = c.spare[:0], nil
	c.writing = true
	c.mu.Unlock()
	err := c.writeOut(out)
	if err == nil {
		err = c.writeOut(p)
	}
	c.mu.Lock()
	c.writing = false
	if c.err == nil {
		c.spare = out[:0]
		if err != nil {
			c.err = err
		}
	}
	if c.err != nil {
		c.buf, c.spare = nil, nil
		err = c.err
	}
	c.mu.Unlock()
	return err
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

// backlogged reports whether the connection's writer is at work (corked),
// bytes are held, or a socket write is under way, i.e. whether a frame
// written now would wait behind others.
func (c *coalescingConn) backlogged() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil && (c.corked || c.writing || len(c.buf) > 0)
}

// Close closes the socket. Later Writes and Flushes fail with
// net.ErrClosed; a socket write under way fails as the socket closes.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.buf, c.spare, c.corked = nil, nil, false
	c.mu.Unlock()
	return c.Conn.Close()
}

// writeOut writes out to the socket a chunk at a time. Called under wmu.
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
