//go:build unix

package reconnect

import (
	"net"
	"syscall"
)

// rawTCP returns the raw socket of c, or nil when c is not a TCP socket
// (net.Pipe in tests, another DialFunc's conn) or offers none.
func rawTCP(c net.Conn) syscall.RawConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
