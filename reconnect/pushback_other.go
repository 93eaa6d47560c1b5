//go:build !unix

package reconnect

import "net"

// pushbackWriter is not available off Unix: writes are judged by how long
// they took (see coalescingConn.writeOut).
func pushbackWriter(net.Conn) func(p []byte) (bool, error) { return nil }
