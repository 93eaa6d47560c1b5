//go:build !linux

package reconnect

import "net"

// quickAcker returns nil: TCP_QUICKACK is Linux's, and elsewhere the
// kernel's acknowledgements are left as they are.
func quickAcker(net.Conn) func() error { return nil }
