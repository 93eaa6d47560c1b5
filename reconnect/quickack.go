package reconnect

// A node sends a large answer on the shared socket as one long stream of
// segments, and that one TCP flow is the whole path: where a relay gives
// each client its own upstream flow, every answer muxd gets comes down this
// one. A receiver normally delays its acknowledgements, and on a fast link
// (loopback, a LAN) the sender's window then waits on them: the node's
// congestion control paces the flow by acknowledgements that come late.
// So muxd asks the kernel to acknowledge at once (TCP_QUICKACK) after each
// read of a large answer's payload (what it bought: docs/perf-log.md).
//
// TCP_QUICKACK is not sticky (the kernel returns to delayed
// acknowledgements on its own), so it is asked again after every such read:
// one setsockopt per read of at least readAheadSize, a small cost beside
// the copy of that read. Small answers, read through readAhead's buffer,
// are left to the kernel's default, so a busy stream of small answers costs
// no extra system call.

// ackLargeReads reports whether a read into p that took bytes from the
// socket asks for an immediate acknowledgement: a read straight into a
// destination of readAheadSize or more, which is a large message's payload.
func ackLargeReads(p []byte, fromSocket int) bool {
	return fromSocket > 0 && len(p) >= readAheadSize
}
