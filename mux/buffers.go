package mux

import (
	"fmt"
	"io"
)

// Buffers are kept for the next message up to a size; one that grew past
// it for a large message is let go, so that one big message does not pin
// memory for the life of a session. A session's bound is small (requests
// are small, and there may be 10,000 clients); the one upstream reader keeps
// room for a typical block.
const (
	maxKeptSessionBuf  = 16 << 10 // a client's read and write buffers
	maxKeptUpstreamBuf = 4 << 20
)

// readMessage reads r to its end into dst (reused from the previous message)
// and returns it, reading at most max bytes when max >= 0: a message longer
// than max comes back as its first max+1 bytes, for the caller to answer
// "too large". The readers of muxd reuse the result for the next message, so
// whoever is handed it must not keep a reference to it (dispatch and route
// copy what they keep).
func readMessage(dst []byte, r io.Reader, max int64) ([]byte, error) {
	dst = dst[:0]
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		room := dst[len(dst):cap(dst)]
		if max >= 0 && int64(len(dst)+len(room)) > max+1 {
			room = room[:max+1-int64(len(dst))]
		}
		n, err := r.Read(room)
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, fmt.Errorf("read message: %w", err)
		}
		if max >= 0 && int64(len(dst)) > max {
			return dst, nil
		}
	}
}

// reuse returns s emptied for reuse, or nil when its capacity is past
// maxCap.
func reuse[T any](s []T, maxCap int) []T {
	if cap(s) > maxCap {
		return nil
	}
	return s[:0]
}
