package reconnect

import (
	"net"
	"syscall"
)

// quickAcker returns a function that asks the kernel to acknowledge what
// c has received at once (TCP_QUICKACK), or nil when c is not a TCP
// socket. The function is called by c's one reading goroutine; it does not
// allocate.
func quickAcker(c net.Conn) func() error {
	rc := rawTCP(c)
	if rc == nil {
		return nil
	}
	var setErr error
	set := func(fd uintptr) {
		setErr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	}
	return func() error {
		if err := rc.Control(set); err != nil {
			return err
		}
		return setErr
	}
}
