package reconnect

import (
	"net"
	"sync"
	"time"
)

// coalesceLimit bounds what a coalescingConn holds unwritten; a writer
// past it waits for the socket, which is how backpressure still reaches the
// callers.
const coalesceLimit = 4 << 20

// flusherLinger is how long an idle flusher waits for more before it exits:
// long enough that a busy connection keeps one goroutine instead of starting
// one per frame, short enough that an idle one holds none.
const flusherLinger = 2 * time.Millisecond

// coalescingConn turns the shared upstream socket's many small writes into
// few system calls. coder/websocket writes and flushes every frame on its
// own, under its own write lock, so on a socket that many clients share each
// request would cost a system call and the next writer would wait for it.
// Here Write only appends to a buffer; one flusher goroutine, started when
// the buffer goes from empty to not, writes out everything that has queued
// meanwhile in one call, and exits once the buffer has stayed empty for
// flusherLinger. Frames keep their order.
//
// An error from the socket is returned by the next Write (and every one
// after); the connection is broken by then and its reader fails too.
// Write and Close may be called concurrently.
type coalescingConn struct {
	net.Conn

	mu       sync.Mutex
	drained  sync.Cond // signalled whenever the flusher has written a batch
	buf      []byte
	spare    []byte
	flushing bool
	err      error
	more     chan struct{} // cap 1: Write added to buf while a flusher runs
}

func newCoalescingConn(c net.Conn) *coalescingConn {
	cc := &coalescingConn{Conn: c, more: make(chan struct{}, 1)}
	cc.drained.L = &cc.mu
	return cc
}

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

func (c *coalescingConn) flush() {
	linger := time.NewTimer(flusherLinger)
	defer linger.Stop()
	c.mu.Lock()
	for c.err == nil {
		if len(c.buf) == 0 {
			c.mu.Unlock()
			linger.Reset(flusherLinger)
			select {
			case <-c.more:
			case <-linger.C:
			}
			c.mu.Lock()
			if len(c.buf) == 0 {
				break
			}
		}
		out := c.buf
		c.buf = c.spare[:0]
		c.mu.Unlock()
		_, err := c.Conn.Write(out)
		c.mu.Lock()
		if cap(out) <= coalesceLimit {
			c.spare = out[:0]
		}
		if err != nil {
			c.err = err
		}
		c.drained.Broadcast()
	}
	c.flushing = false
	c.drained.Broadcast()
	c.mu.Unlock()
}
