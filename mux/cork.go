package mux

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

const (
	// corkLimit bounds what a corked connection holds unwritten; a
	// message that would take it past goes out at once, with the buffer
	// before it, in one writev and without being copied.
	corkLimit = 64 << 10
	// corkCloseWait bounds how long Close waits for the peer to take
	// what is still buffered.
	corkCloseWait = 100 * time.Millisecond
)

// corkConn lets a session's writer send every message it has in one system
// call. coder/websocket flushes each message to the socket on its own; while
// the connection is corked, Write only appends to a buffer, and uncork
// writes the buffer out. Uncorked, Write goes straight to the socket.
//
// coder/websocket serializes its writes (the writer's messages, pongs from
// the reader, the close frame), so Write is never called concurrently with
// itself; uncork may be, and holds the lock while it writes so that a write
// that comes meanwhile follows the buffer instead of overtaking it.
//
// Close writes out what is buffered first: coder/websocket closes the socket
// right after it writes a close frame (its answer to the client's close, or
// its own), which may still be in the buffer behind answers. It waits at
// most corkCloseWait for a peer that does not read.
type corkConn struct {
	net.Conn

	mu     sync.Mutex
	corked bool
	closed bool
	buf    []byte
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if !c.corked {
		return c.Conn.Write(p)
	}
	if len(c.buf)+len(p) < corkLimit {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	bufs := net.Buffers{c.buf, p}
	_, err := bufs.WriteTo(c.Conn)
	c.buf = reuse(c.buf, maxKeptSessionBuf)
	if err != nil {
		return 0, fmt.Errorf("write corked messages: %w", err)
	}
	return len(p), nil
}

// Close writes out what is buffered, waiting at most corkCloseWait, and
// closes the socket. The deadline also ends a write in progress that holds
// the lock (a peer that does not read).
func (c *corkConn) Close() error {
	c.Conn.SetWriteDeadline(time.Now().Add(corkCloseWait))
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.flushLocked() // closing either way; the peer may have gone
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// cork makes Write buffer until uncork.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork writes out what was buffered since cork, in one call, and makes
// Write go straight to the socket again.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	return c.flushLocked()
}

func (c *corkConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = reuse(c.buf, maxKeptSessionBuf)
	if err != nil {
		return fmt.Errorf("write corked messages: %w", err)
	}
	return nil
}

// corkingWriter hands coder/websocket's Accept a connection it can cork: its
// Hijack wraps the hijacked socket, and points the buffered writer the
// library writes through at the wrapper.
type corkingWriter struct {
	http.ResponseWriter
	conn *corkConn // set by Hijack
}

func (w *corkingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("flush before hijack: %w", err)
	}
	w.conn = &corkConn{Conn: c}
	brw.Writer.Reset(w.conn)
	return w.conn, brw, nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *corkingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
