package reconnect

import "net"

// readAheadSize is how much one read from the upstream socket asks for.
// coder/websocket reads a connection through a 4 KiB bufio.Reader, so a
// busy upstream (answers of a few KiB each, many a millisecond) costs a
// system call per answer or two; reading ahead up to this much takes every
// answer already in the socket in one call. A read of this size or more
// (a large answer's payload, which bufio reads straight into its
// destination) bypasses the buffer and is not copied twice.
const readAheadSize = 64 << 10

// readAhead buffers what one read from a socket returned beyond what the
// caller asked for. It is owned by the connection's one reading goroutine
// (coder/websocket's reader); Read is never called concurrently with
// itself.
type readAhead struct {
	buf  []byte // allocated on the first small read
	r, w int    // buf[r:w] is read from the socket, not yet returned
	err  error  // the socket's error that came with buffered bytes, returned after them
}

// read fills p from what is buffered, or else from one read of conn:
// straight into p when p is at least readAheadSize, through the buffer
// otherwise. It returns the bytes given and the bytes that came from the
// socket in this call.
func (ra *readAhead) read(conn net.Conn, p []byte) (n, fromSocket int, err error) {
	if ra.r < ra.w {
		n = copy(p, ra.buf[ra.r:ra.w])
		ra.r += n
		return n, 0, nil
	}
	if ra.err != nil {
		return 0, 0, ra.err
	}
	if len(p) >= readAheadSize {
		n, err = conn.Read(p)
		return n, n, err
	}
	if ra.buf == nil {
		ra.buf = make([]byte, readAheadSize)
	}
	m, err := conn.Read(ra.buf)
	n = copy(p, ra.buf[:m])
	ra.r, ra.w = n, m
	if err != nil && n < m {
		// The bytes read before the error go first.
		ra.err, err = err, nil
	}
	return n, m, err
}
