//go:build unix

package reconnect

import (
	"errors"
	"net"
	"syscall"
)

// pushbackWriter returns a function that writes p whole to c and reports
// whether the socket pushed back on the way (a write found it full, and
// the rest went once the peer's side had made room), or nil when c is not
// a socket muxd can write to without waiting (not TCP). The function is
// called by c's one writing goroutine.
//
// Only such a write is proof that the node's side takes our bytes (see
// liveness): how long a write took is not, since on a busy host a write
// into a socket with room waits for the CPU as long as one into a full
// socket waits for the peer.
func pushbackWriter(c net.Conn) func(p []byte) (pushedBack bool, err error) {
	rc := rawTCP(c)
	if rc == nil {
		return nil
	}
	var (
		rest   []byte
		pushed bool
		werr   error
	)
	// write runs the writes rc.Write asks for: it returns false (wait for
	// the socket to take more) on EAGAIN, true once p is written or on an
	// error.
	write := func(fd uintptr) bool {
		for len(rest) > 0 {
			n, err := syscall.Write(int(fd), rest)
			if n > 0 {
				rest = rest[n:]
			}
			switch {
			case err == nil:
			case errors.Is(err, syscall.EINTR):
			case errors.Is(err, syscall.EAGAIN):
				pushed = true
				return false
			default:
				werr = err
				return true
			}
		}
		return true
	}
	return func(p []byte) (bool, error) {
		rest, pushed, werr = p, false, nil
		if err := rc.Write(write); err != nil {
			return false, err
		}
		rest = nil
		return pushed, werr
	}
}
